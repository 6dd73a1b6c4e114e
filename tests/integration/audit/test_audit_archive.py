"""The audit archive against real Redis, PostgreSQL and S3: every event archived once in a hash
chain, the table refuses changes, segments rolled to the archive bucket, tampering named."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta

import asyncpg
import pytest

from services.audit.archive import WRITER_ROLE
from services.audit.chain import BreakKind, StoredLink, find_break, link
from services.audit.segments import check_segment, load_rows, load_segments, read_segment_objects
from services.ledger.service import LedgerSettings, build_spec
from shared.events import canonical_json
from shared.names import ARCHIVE_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store
from tests.helpers.running_services import RunningServices
from tests.unit.ledger.builders import T0, granted, released, renewed, submitted

pytestmark = pytest.mark.integration

LEDGER = build_spec(tuning=LedgerSettings(segment_events=4), periodic_check_s=0.2)


def some_events(n_tasks: int) -> list:
    events = []
    for i in range(n_tasks):
        task, lease = f"T{i}", f"L{i}"
        events += [
            submitted(task),
            granted(lease, task, at=T0),
            renewed(lease, task, at=T0 + timedelta(minutes=1)),
            released(lease, task, ended_at=T0 + timedelta(minutes=2)),
        ]
    return events


async def archived(running: RunningServices) -> list[asyncpg.Record]:
    return await running.fetch("SELECT seq, event_id, body, prev_hash, hash FROM audit.events ORDER BY seq")


def links(rows: list[asyncpg.Record]) -> list[StoredLink]:
    return [StoredLink(r["seq"], r["event_id"], r["body"], r["prev_hash"], r["hash"]) for r in rows]


async def test_every_event_is_archived_once_in_a_hash_chain(fresh_settings: Settings) -> None:
    events = some_events(2)
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*events)
        await running.publish(events[0], events[3])  # redelivered duplicates
        rows = await running.wait_for_count(lambda: archived(running), len(events))
        # the ledger's own usage events come back through cf:events and are archived too
        usage = await running.wait_for_count(lambda: running.events("usage.batch_recorded"), 1)
        rows = await running.wait_for_count(lambda: archived(running), len(events) + len(usage))

    by_id = {row["event_id"]: row for row in rows}
    assert len(by_id) == len(rows), "an event was archived twice"
    for event in [*events, *usage]:
        assert by_id[event.event_id]["body"] == canonical_json(event).decode()
    assert [row["seq"] for row in rows] == list(range(1, len(rows) + 1))
    assert find_break(links(rows)) is None
    assert rows[0]["prev_hash"] == "0" * 64
    assert rows[1]["hash"] == link(rows[0]["hash"], rows[1]["body"])


async def test_the_archive_refuses_update_delete_and_truncate(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*some_events(1))
        await running.wait_for_count(lambda: archived(running), 4)
        assert running.pool is not None
        async with running.pool.acquire() as conn:
            for statement in ("UPDATE audit.events SET actor = 'user:mallory'", "DELETE FROM audit.events",
                              "TRUNCATE audit.events", "DELETE FROM audit.archive"):  # fmt: skip
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
                    await conn.execute(statement)
            # the writer role the archiver inserts as has no UPDATE or DELETE privilege at all
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {WRITER_ROLE}")
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
                    await conn.execute("UPDATE audit.events SET actor = 'user:mallory'")
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {WRITER_ROLE}")
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
                    await conn.execute("DELETE FROM audit.events")
        assert len(await archived(running)) >= 4


async def test_segments_are_rolled_and_a_changed_byte_is_named(fresh_settings: Settings) -> None:
    events = some_events(3)  # 12 events + usage.recorded: at least 3 segments of 4
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*events)

        async def three_segments() -> bool:
            return len(await running.fetch("SELECT 1 FROM audit.segments")) >= 3

        assert await running.wait_until(three_segments)
        assert running.pool is not None
        records = await load_segments(running.pool)
        rows = {r.segment_no: await load_rows(running.pool, r.first_seq, r.last_seq) for r in records}

    assert [(r.first_seq, r.last_seq) for r in records[:3]] == [(1, 4), (5, 8), (9, 12)]
    async with open_object_store(fresh_settings) as store:
        for record in records:
            data, manifest = await read_segment_objects(store, record)
            assert data is not None and manifest is not None
            assert [line for line in gzip.decompress(data).decode().splitlines()] == [r.body for r in rows[record.segment_no]]
            assert check_segment(record, data, manifest, rows[record.segment_no]) == []

        # an operator overwrites segment 2 with one byte changed in its third event
        second = records[1]
        data, manifest = await read_segment_objects(store, second)
        lines = gzip.decompress(data).decode().split("\n")
        lines[2] = lines[2].replace('"subject_seq":', '"subject_seq": ', 1)
        await store.put(ARCHIVE_BUCKET, second.object_key, gzip.compress("\n".join(lines).encode()))
        data, manifest = await read_segment_objects(store, second)

    problems = check_segment(second, data, manifest, rows[2])
    assert [p.detail.split(":")[0] for p in problems][0].startswith(f"object {second.object_key} changed")
    named = [p for p in problems if p.seq is not None]
    assert [(p.seq, p.event_id) for p in named] == [(7, rows[2][2].event_id)]


async def test_a_changed_row_breaks_the_chain_at_that_row(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, LEDGER) as running:
        await running.publish(*some_events(2))
        await running.wait_for_count(lambda: archived(running), 8)
        assert running.pool is not None
        async with running.pool.acquire() as conn, conn.transaction():  # a DBA with the owner's rights
            await conn.execute("ALTER TABLE audit.events DISABLE TRIGGER events_append_only")
            await conn.execute("UPDATE audit.events SET body = replace(body, $1, $2) WHERE seq = 5", '"actor":"', '"actor":"X')
            await conn.execute("ALTER TABLE audit.events ENABLE TRIGGER events_append_only")
        rows = await archived(running)

    broken = find_break(links(rows))
    assert broken is not None
    assert (broken.seq, broken.event_id, broken.kind) == (5, rows[4]["event_id"], BreakKind.HASH)


async def test_verify_fails_on_a_changed_segment_or_row_and_names_the_first_breaking_event(fresh_settings: Settings) -> None:
    from services.audit.verify import verify_archive

    async with RunningServices(fresh_settings, LEDGER) as running, open_object_store(fresh_settings) as store:
        await running.publish(*some_events(2))

        async def two_segments() -> bool:
            return len(await running.fetch("SELECT 1 FROM audit.segments")) >= 2

        assert await running.wait_until(two_segments)
        assert running.pool is not None

        async def holds() -> bool:  # everything the ledger published (usage, the first round) is archived
            # the first round closes on a timer just after start-up: wait for its event, or it may be
            # published after this holds and before the ledger stops (then unarchived: "lost")
            closed = await running.fetch("SELECT 1 FROM audit.events WHERE type = 'round.closed'")
            return bool(closed) and (await verify_archive(running.pool, store, settle_s=0)).ok

        assert await running.wait_until(holds)
        await running.stop_service("ledger")  # quiet: nothing more is archived or rolled
        clean = await verify_archive(running.pool, store, settle_s=0)
        first = (await load_segments(running.pool))[0]
        data, _ = await read_segment_objects(store, first)
        lines = gzip.decompress(data).decode().split("\n")
        lines[1] = lines[1].replace('"actor":"', '"actor":"X', 1)
        await store.put(ARCHIVE_BUCKET, first.object_key, gzip.compress("\n".join(lines).encode()))
        segment_tampered = await verify_archive(running.pool, store, settle_s=0)
        async with running.pool.acquire() as conn, conn.transaction():
            await conn.execute("ALTER TABLE audit.events DISABLE TRIGGER events_append_only")
            await conn.execute("UPDATE audit.events SET actor = 'user:mallory', body = replace(body, $1, $2) WHERE seq = 6",
                               '"actor":"', '"actor":"user:mallory')  # fmt: skip
            await conn.execute("ALTER TABLE audit.events ENABLE TRIGGER events_append_only")
        row_tampered = await verify_archive(running.pool, store, settle_s=0)
        rows = await archived(running)

    assert clean.ok, json.dumps(clean.as_json())  # in full: pytest cuts a dict's repr short
    assert not segment_tampered.ok
    assert segment_tampered.first_break is not None and segment_tampered.first_break["seq"] == 2
    assert segment_tampered.first_break["event_id"] == rows[1]["event_id"]
    assert not row_tampered.ok and row_tampered.chain_break is not None
    assert (row_tampered.chain_break.seq, row_tampered.first_break["seq"]) == (6, 2)  # the segment still breaks first
