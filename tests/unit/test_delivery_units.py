"""Pure parts of the delivery package: migration files, schema names, wire format, dead-letter fields."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from faststream.redis.parser import BinaryMessageFormatV1

from shared.delivery.arrival import Arrived, appended_at, with_arrival
from shared.delivery.entry_steps import Entry, Subscription, entries_of
from shared.delivery.db import quote_schema
from shared.delivery.deadletter import DeadLetterSource, DeadReason, deadletter_fields, parse_deadletter
from shared.delivery.migrations import (
    DELIVERY_MIGRATIONS,
    AppliedMigration,
    MigrationChecksumError,
    MigrationError,
    check_unchanged,
    load_migrations,
)
from shared.delivery.wire import MissingBodyError, extract_body, wire_fields
from shared.events.envelope import canonical_json
from tests.helpers.delivery_support import a_test_event, parse_test_event


def test_migrations_load_in_numeric_order_and_ignore_other_files(tmp_path: Path) -> None:
    for name in ("010_ten.sql", "002_two.sql", "README.md", "003-bad-name.sql", "001_one.sql"):
        (tmp_path / name).write_text(f"-- {name}")
    assert [(m.version, m.name) for m in load_migrations(tmp_path)] == [(1, "one"), (2, "two"), (10, "ten")]


def test_two_files_with_one_version_are_refused(tmp_path: Path) -> None:
    (tmp_path / "001_a.sql").write_text("")
    (tmp_path / "0001_b.sql").write_text("")
    with pytest.raises(MigrationError, match="version 1"):
        load_migrations(tmp_path)


def test_an_edited_applied_migration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "001_a.sql").write_text("CREATE TABLE a (id int);")
    [migration] = load_migrations(tmp_path)
    record = AppliedMigration("service", 1, "a", "0" * 64, datetime.now(UTC))
    with pytest.raises(MigrationChecksumError, match="001_a"):
        check_unchanged([migration], {1: record}, "ledger", "service")
    check_unchanged([migration], {1: AppliedMigration("service", 1, "a", migration.checksum, record.applied_at)}, "ledger", "service")


def test_the_delivery_migration_set_ships_with_the_package() -> None:
    assert [m.version for m in load_migrations(DELIVERY_MIGRATIONS)][0] == 1


@pytest.mark.parametrize("name", ["Ledger", "ledger;drop", "1abc", "a" * 64, "", 'x"y'])
def test_schema_names_other_than_lower_snake_case_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid schema name"):
        quote_schema(name)


def test_schema_names_are_quoted() -> None:
    assert quote_schema("ledger") == '"ledger"'


def test_wire_fields_carry_the_canonical_body_that_parses_back() -> None:
    event = a_test_event(3, subject="task/T9")
    fields = {k.encode(): v.encode() for k, v in wire_fields(event).items()}
    assert (fields[b"type"], fields[b"subject"]) == (b"test.happened", b"task/T9")
    assert canonical_json(parse_test_event(extract_body(fields))) == canonical_json(event) == fields[b"event"]


async def test_extract_body_accepts_faststream_framed_entries_and_refuses_bodiless_ones() -> None:
    framed = await BinaryMessageFormatV1.encode(message=b'{"a":1}', reply_to=None, headers=None, correlation_id="c")
    assert extract_body({b"__data__": framed}) == b'{"a":1}'
    with pytest.raises(MissingBodyError, match="event"):
        extract_body({b"type": b"x"})


def test_deadletter_fields_keep_the_original_byte_for_byte_and_read_back() -> None:
    original = {b"event": b"\xff not utf-8", b"type": b"task.submitted"}
    source = DeadLetterSource("cf:events", "ledger", "host-1", "1-0")
    fields = deadletter_fields(source, original, DeadReason.FAILED, 5, ValueError("no quota row"))
    as_stored = {(k if isinstance(k, bytes) else k.encode()): (v if isinstance(v, bytes) else v.encode()) for k, v in fields.items()}

    dead = parse_deadletter("9-0", as_stored)

    assert dead.original == original
    assert (dead.stream, dead.group, dead.entry_id, dead.reason, dead.deliveries) == ("cf:events", "ledger", "1-0", "failed", 5)
    assert dead.error == "ValueError: no quota row"


def test_entries_of_reads_single_and_batch_messages() -> None:
    single = {"message_ids": [b"1-0"], "data": {b"event": b"{}"}}
    batch = {"message_ids": [b"1-0", b"2-0"], "data": [{b"event": b"a"}, {b"event": b"b"}]}
    assert [(e.entry_id, e.fields) for e in entries_of(single)] == [("1-0", {b"event": b"{}"})]
    assert [e.entry_id for e in entries_of(batch)] == ["1-0", "2-0"]


def test_subscription_defaults_follow_the_conventions() -> None:
    sub = Subscription(stream="cf:events", group="ledger", consumer="c")
    assert (sub.max_deliveries, sub.start_id, sub.body_field, sub.deadletter_stream) == (5, "0", "event", "cf:deadletter")


def test_an_entry_arrived_when_redis_appended_it_by_its_id() -> None:
    assert appended_at("1700000000123-0") == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert appended_at("1700000000123-7") == appended_at("1700000000123-0")


def test_with_arrival_parses_the_body_and_keeps_when_the_entry_arrived() -> None:
    event = a_test_event(1)
    as_read = {name.encode(): value if isinstance(value, bytes) else str(value).encode()
               for name, value in wire_fields(event).items()}  # what XREADGROUP returns
    entry = Entry("1700000000123-4", as_read)
    arrived = with_arrival(parse_test_event)(entry)
    assert arrived == Arrived(event, appended_at("1700000000123-4"))
