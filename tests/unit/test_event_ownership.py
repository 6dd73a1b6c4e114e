"""Every event type has one owner, and the gate's screen forwards exactly what a stream's owner owns."""

from __future__ import annotations

import pytest

from services.gate.forwarder import ReadEntry, screen_entry
from shared.delivery.wire import wire_fields
from shared.events.catalog import EVENT_TYPES
from shared.events.ownership import OWNER_OF, PRODUCERS, refusal
from shared.names import producer_stream
from shared.redis_acl import SERVICE_STREAMS
from tests.helpers.task_events import TaskStory


def test_every_catalogued_event_type_has_an_owner() -> None:
    assert set(EVENT_TYPES) - set(OWNER_OF) == set(), "add the new type to shared/events/ownership.py _FACETS"


def test_every_producer_stream_is_written_by_some_service_and_read_by_the_gate() -> None:
    relayed = {schema for streams in SERVICE_STREAMS.values() for schema in streams.event_schemas}
    assert relayed == set(PRODUCERS)


def _entry(owner: str, event: object, overrides: dict[str, str]) -> ReadEntry:
    fields = {k.encode(): v.encode() for k, v in {**wire_fields(event), **overrides}.items()}  # type: ignore[arg-type]
    return ReadEntry(producer_stream(owner), "1-0", fields)


story = TaskStory("T1")


@pytest.mark.parametrize(
    ("owner", "event", "overrides", "reason"),
    [
        ("dispatcher", story.succeeded(), {}, None),
        ("intake", story.submitted(), {}, None),
        ("matcher", story.succeeded(), {}, "task.succeeded is owned by dispatcher; matcher may not write it"),
        ("intake", story.granted(), {}, "lease.granted is owned by dispatcher; intake may not write it"),
        ("dispatcher", story.matched(), {}, "task.matched is owned by matcher; dispatcher may not write it"),
        ("matcher", story.matched(), {"type": "task.queued"}, "the entry's type field 'task.queued' differs from its body's type 'task.matched'"),
        ("matcher", story.matched(), {"event": "not json"}, "unreadable event body: JSONDecodeError"),
        ("matcher", story.matched(), {"event": '{"type": "task.exploded"}', "type": "task.exploded"}, "unknown event type 'task.exploded' on the stream of matcher"),
    ],
)
def test_the_gate_forwards_only_what_the_streams_owner_owns(owner: str, event: object, overrides: dict[str, str], reason: str | None) -> None:
    assert screen_entry(_entry(owner, event, overrides)) == reason


def test_an_entry_without_a_body_is_refused() -> None:
    assert screen_entry(ReadEntry(producer_stream("intake"), "1-0", {b"type": b"task.submitted"})) == "entry has no 'event' field"


def test_refusal_names_both_owners() -> None:
    assert refusal("ledger", "usage.recorded") is None
    assert refusal("identity", "usage.recorded") == "usage.recorded is owned by ledger; identity may not write it"
