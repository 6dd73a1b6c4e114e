"""The matcher parses only the event types it handles; other entries reach it as `SkippedEntry`."""

from __future__ import annotations

from services.common.runtime import SkippedEntry, parse_events_of
from services.matcher.batch import RELEVANT_TYPES
from shared.delivery.entry_steps import Entry
from shared.delivery.wire import wire_fields
from shared.events import canonical_json

from tests.unit.ledger.builders import T0, renewed

from .builders import submitted


def an_entry(fields: dict[str, str]) -> Entry:
    return Entry("1-0", {key.encode(): value.encode() for key, value in fields.items()})


def test_relevant_types_are_parsed_and_others_skipped_unread() -> None:
    parse = parse_events_of(*RELEVANT_TYPES)
    event = submitted("T1")
    assert parse(an_entry(wire_fields(event))) == event

    lease = wire_fields(renewed("L1", "T1", at=T0))
    skipped = parse(an_entry({**lease, "event": "not even JSON"}))
    assert skipped == SkippedEntry("1-0", "lease.renewed")


def test_entries_without_a_type_field_are_parsed_in_full() -> None:
    event = submitted("T2")
    assert parse_events_of(*RELEVANT_TYPES)(an_entry({"event": canonical_json(event).decode()})) == event
