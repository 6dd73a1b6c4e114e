"""`parse_event`: upcasting old schema versions and clear errors for bad bodies."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.events import (
    EVENT_CLASSES,
    UPCASTERS,
    EventParseError,
    LeaseRenewed,
    TaskSubmitted,
    UpcasterRegistry,
    canonical_json,
    current_schema_version,
    make_event,
    parse_command,
    parse_event,
    parse_report,
)
from shared.events.reports import Heartbeat, RevokeCommand


def a_renewal_v1() -> dict[str, Any]:
    """A lease.renewed event as schema v1 wrote it (the expiry was called `expires_at`)."""
    return {
        "event_id": "01JY0000000000000000000000", "type": "lease.renewed", "subject": "lease/L9",
        "subject_seq": 4, "occurred_at": "2025-06-01T12:00:00Z", "producer": "dispatcher/local-1",
        "actor": "service:dispatcher", "correlation_id": None, "causation_id": None, "schema_version": 1,
        "data": {"lease_id": "L9", "task_id": "T1", "expires_at": "2025-06-01T12:00:30Z"},
    }


def a_submitted_event() -> dict[str, Any]:
    event = make_event(
        TaskSubmitted, subject="task/T1", subject_seq=1, producer="intake/a", actor="upstream:pipeline-x",
        data={
            "task_id": "T1", "idempotency_key": "k1",
            "submission": {
                "name": "train", "project": "vision", "priority_class": "standard", "gpus": 2,
                "estimate_gpu_hours": 4, "profile": "compute", "inputs": ["s3://data-bucket/shards/"],
            },
        },
    )
    return json.loads(canonical_json(event))


def test_a_v1_lease_renewal_is_upcast_to_v2() -> None:
    event = parse_event(json.dumps(a_renewal_v1()))
    assert isinstance(event, LeaseRenewed)
    assert event.schema_version == 2
    assert event.data.until == datetime(2025, 6, 1, 12, 0, 30, tzinfo=UTC)
    assert event.data.heartbeats == 1


def test_upcasting_leaves_the_callers_dict_alone() -> None:
    raw = a_renewal_v1()
    before = copy.deepcopy(raw)
    parse_event(raw)
    assert raw == before


def test_every_schema_version_above_1_has_a_complete_upcaster_chain() -> None:
    for cls in EVENT_CLASSES:
        event_type = cls.model_fields["type"].default
        for version in range(1, current_schema_version(event_type)):
            assert UPCASTERS.has_step(event_type, version), f"{event_type} v{version} has no upcaster"


def test_a_registry_chains_upcasters_one_version_at_a_time() -> None:
    registry = UpcasterRegistry()
    registry.register("demo.changed", from_version=1)(lambda d: {"b": d["a"]})
    registry.register("demo.changed", from_version=2)(lambda d: {"c": d["b"] * 2})
    assert registry.upcast("demo.changed", 1, {"a": 21}, to_version=3) == {"c": 42}
    assert registry.upcast("demo.changed", 2, {"b": 1}, to_version=3) == {"c": 2}
    assert registry.upcast("demo.changed", 3, {"c": 5}, to_version=3) == {"c": 5}


def test_a_registry_refuses_a_second_upcaster_for_the_same_step() -> None:
    registry = UpcasterRegistry()
    registry.register("demo.changed", from_version=1)(lambda d: d)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("demo.changed", from_version=1)(lambda d: d)


def test_parse_event_uses_the_registry_it_is_given() -> None:
    with pytest.raises(EventParseError, match="no upcaster registered for lease.renewed from schema v1 to v2"):
        parse_event(a_renewal_v1(), registry=UpcasterRegistry())


def test_a_version_newer_than_the_code_is_refused() -> None:
    raw = a_renewal_v1() | {"schema_version": 3}
    with pytest.raises(EventParseError, match="newer than this code's v2; upgrade cardflow") as caught:
        parse_event(raw)
    assert caught.value.problems[0].field == "schema_version" and caught.value.event_type == "lease.renewed"


def test_an_upcaster_that_cannot_read_the_old_payload_is_reported_as_such() -> None:
    registry = UpcasterRegistry()
    registry.register("lease.renewed", from_version=1)(lambda d: {**d, "until": d["not_there"]})
    with pytest.raises(EventParseError, match="a v1 payload the upcaster can read") as caught:
        parse_event(a_renewal_v1(), registry=registry)
    assert caught.value.problems[0].field == "data"


@pytest.mark.parametrize(
    ("body", "field", "expected"),
    [
        (b"{not json", "(whole input)", "JSON"),
        (b"\xff\xfe", "(whole input)", "JSON"),
        ("[1, 2]", "(whole input)", "a JSON object"),
        ({"subject": "task/T1"}, "type", "the event type (the field is missing)"),
        ({"type": "task.exploded"}, "type", "a known event type, one of: agent.enrolled, agent.unenrolled, config.changed"),
        ({"type": 5}, "type", "a known event type"),
    ],
)
def test_bodies_that_are_not_events_name_the_problem(body: Any, field: str, expected: str) -> None:
    with pytest.raises(EventParseError) as caught:
        parse_event(body)
    [problem] = caught.value.problems
    assert problem.field == field and expected in problem.expected


def test_every_problem_of_a_bad_event_is_named_at_once() -> None:
    raw = a_submitted_event()
    raw["subject_seq"] = 0
    raw["occurred_at"] = "2025-06-01T12:00:00"  # no time zone
    raw["data"]["submission"]["gpus"] = 0
    raw["data"]["submission"]["inputs"] = ["s3://data-bucket/shards/", {"dataset": "imagenet"}]
    raw["data"]["extra"] = True
    with pytest.raises(EventParseError) as caught:
        parse_event(raw)
    problems = {p.field: p for p in caught.value.problems}
    assert set(problems) == {
        "subject_seq", "occurred_at", "data.submission.gpus", "data.submission.inputs[1].version", "data.extra",
    }
    assert problems["data.submission.gpus"].value == 0
    assert problems["data.submission.gpus"].expected == "a number of at least 1"
    assert "time zone" in problems["occurred_at"].expected
    message = str(caught.value)
    assert message.startswith(f"cannot parse event task.submitted {raw['event_id']}:")
    assert "data.submission.inputs[1].version: missing" in message


def test_a_wrong_schema_version_type_is_named() -> None:
    with pytest.raises(EventParseError, match="schema_version: got \"2\"; expected a whole number"):
        parse_event(a_renewal_v1() | {"schema_version": "2"})


def test_reports_and_commands_parse_only_their_own_types() -> None:
    heartbeat = make_event(
        Heartbeat, subject="agent/a1", subject_seq=1, producer="agent/a1", actor="agent:a1",
        data={"agent_id": "a1", "node_id": "n1", "gpus": [{"index": 0, "util_pct": 97.5}]},
    )
    assert parse_report(canonical_json(heartbeat)) == heartbeat
    with pytest.raises(EventParseError, match="a known event type") as caught:
        parse_event(canonical_json(heartbeat))
    assert "cannot parse event" in str(caught.value)
    with pytest.raises(EventParseError, match="cannot parse command"):
        parse_command(canonical_json(heartbeat))


def test_bad_reports_and_commands_name_each_field() -> None:
    revoke = {
        "type": RevokeCommand.model_fields["type"].default, "subject": "agent/a1", "subject_seq": 1,
        "producer": "dispatcher/a", "actor": "service:dispatcher",
        "data": {"agent_id": "a1", "lease_id": "L1", "task_id": "T1", "fencing_token": 0, "reason": "bored"},
    }
    with pytest.raises(EventParseError) as caught:
        parse_command(revoke)
    assert {p.field for p in caught.value.problems} == {"data.fencing_token", "data.reason"}
    with pytest.raises(EventParseError, match="JSON"):
        parse_report(b"{")
