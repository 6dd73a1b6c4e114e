"""The event catalog, `make_event`, canonical JSON and task states."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from shared.events import (
    COMMAND_TYPES,
    EVENT_CLASSES,
    EVENT_TYPES,
    MESSAGE_TYPES,
    REPORT_TYPES,
    TERMINAL_STATES,
    Envelope,
    LeaseGranted,
    LeaseGrantedData,
    LeaseRenewed,
    Payload,
    TaskHeldData,
    TaskQueued,
    TaskQueuedData,
    TaskState,
    caused_by,
    canonical_json,
    make_event,
    parse_command,
    parse_event,
)
from shared.events.reports import LeaseGrantCommand
from shared.events.subjects import lease_subject, split_subject, task_subject
from shared.scheduling.model import DeferralReason, PriorityClass, WaitKind

# The event types ARCHITECTURE section 3 names, by owning service.
ARCHITECTURE_TYPES = {
    "intake": ["task.submitted", "task.rejected", "task.cancel_requested"],
    "readiness": ["task.readiness_changed"],
    "matcher": ["task.matched", "task.unmatchable"],
    "dispatcher": [
        "task.queued", "task.held", "lease.granted", "task.started", "task.checkpointed", "task.succeeded",
        "task.failed", "task.requeued", "task.cancelled", "lease.renewed", "lease.expired", "lease.revoked",
        "node.registered", "node.lost",
    ],
    "ledger": [
        "usage.recorded", "quota.granted", "quota.adjusted", "quota.threshold_crossed", "quota.expiring",
        "round.closed",
    ],
    "config": ["config.changed", "template.changed"],
}


def a_grant(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "lease_id": "L9", "task_id": "T1", "agent_id": "agent-1", "node_id": "node-1", "card_type": "H100",
        "gpu_indices": [3, 1], "fencing_token": 7, "ttl_s": 30.0,
        "expires_at": datetime(2025, 6, 1, 12, 0, 30, tzinfo=UTC),
    }
    return data | overrides


def a_lease_granted(**envelope: object) -> LeaseGranted:
    fields: dict[str, object] = {
        "subject": lease_subject("L9"), "subject_seq": 1, "producer": "dispatcher/local-1",
        "actor": "service:dispatcher", "data": a_grant(),
    }
    return make_event(LeaseGranted, **(fields | envelope))  # type: ignore[arg-type]


@pytest.mark.parametrize("event_type", [t for types in ARCHITECTURE_TYPES.values() for t in types])
def test_every_architecture_event_type_has_a_class(event_type: str) -> None:
    assert event_type in EVENT_TYPES


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_event_classes_follow_the_conventions(cls: type[Envelope]) -> None:
    event_type = cls.model_fields["type"].default
    assert EVENT_TYPES[event_type] is cls
    assert re.fullmatch(r"[a-z]+\.[a-z_]+", event_type)
    if event_type not in {"task.unmatchable", "quota.expiring"}:  # ARCHITECTURE names these as states
        assert re.search(r"(ed|Held|Lost)$", cls.__name__), "class names are past tense"
    assert issubclass(cls.model_fields["data"].annotation, Payload)
    assert cls.model_config["frozen"] and cls.model_config["extra"] == "forbid"
    assert cls.__doc__, "each event class says what happened"


def test_reports_and_commands_never_share_a_type_with_events() -> None:
    assert len(MESSAGE_TYPES) == len(EVENT_TYPES) + len(REPORT_TYPES) + len(COMMAND_TYPES)
    assert all(t.startswith("report.") for t in REPORT_TYPES)
    assert all(t.startswith("command.") for t in COMMAND_TYPES)


def test_make_event_builds_commands_for_the_outbox() -> None:
    order = {k: v for k, v in a_grant().items() if k not in {"node_id", "card_type"}}
    command = make_event(
        LeaseGrantCommand, subject="agent/a1", subject_seq=5, producer="dispatcher/a", actor="service:dispatcher",
        data=order | {"estimated_runtime_s": 3600.0, "command": ["python", "train.py"]},
    )
    assert command.type == "command.lease_grant" and command.data.fencing_token == 7
    assert parse_command(canonical_json(command)) == command


def test_make_event_fills_the_envelope_and_validates_the_payload() -> None:
    before = datetime.now(UTC)
    event = a_lease_granted()
    assert isinstance(event, LeaseGranted)
    assert event.type == "lease.granted" and event.schema_version == 1
    assert len(event.event_id) == 26 and event.occurred_at >= before
    assert event.data.gpu_indices == (1, 3)  # distinct, sorted
    assert a_lease_granted().event_id != event.event_id


def test_make_event_accepts_a_type_string_or_a_payload_instance() -> None:
    payload = TaskQueuedData(task_id="T1", project="p", priority_class=PriorityClass.CORE, priority=5)
    event = make_event(
        "task.queued", subject=task_subject("T1"), subject_seq=4, producer="dispatcher/a", actor="service:dispatcher",
        data=payload,
    )
    assert isinstance(event, TaskQueued) and event.data is payload


def test_make_event_refuses_the_wrong_payload_and_unknown_types() -> None:
    wrong = TaskHeldData(task_id="T1", reason="operator", detail="paused")
    with pytest.raises(TypeError, match="TaskQueued carries TaskQueuedData, not TaskHeldData"):
        make_event(TaskQueued, subject="task/T1", subject_seq=1, producer="p", actor="a", data=wrong)
    with pytest.raises(KeyError, match="unknown event type 'task.exploded'"):
        make_event("task.exploded", subject="task/T1", subject_seq=1, producer="p", actor="a", data={})
    with pytest.raises(ValidationError, match="fencing_token"):
        a_lease_granted(data=a_grant(fencing_token=0))
    with pytest.raises(ValidationError, match="each GPU index at most once"):
        a_lease_granted(data=a_grant(gpu_indices=[1, 1]))


def test_events_are_frozen() -> None:
    event = a_lease_granted()
    with pytest.raises(ValidationError):
        event.subject_seq = 2  # type: ignore[misc]


def test_caused_by_keeps_the_correlation_of_the_chain() -> None:
    first = a_lease_granted()
    second = a_lease_granted(subject_seq=2, **caused_by(first))
    third = a_lease_granted(subject_seq=3, **caused_by(second))
    assert (second.correlation_id, second.causation_id) == (first.event_id, first.event_id)
    assert (third.correlation_id, third.causation_id) == (first.event_id, second.event_id)


def test_canonical_json_is_sorted_compact_and_utc() -> None:
    cest = timezone(timedelta(hours=2))
    event = a_lease_granted(occurred_at=datetime(2025, 6, 1, 14, 0, 0, 250000, tzinfo=cest))
    body = canonical_json(event)
    text = body.decode()
    assert '"occurred_at":"2025-06-01T12:00:00.250000Z"' in text
    assert '"expires_at":"2025-06-01T12:00:30Z"' in text
    assert " " not in text.replace("service:dispatcher", "")
    decoded = json.loads(body)
    assert list(decoded) == sorted(decoded) and list(decoded["data"]) == sorted(decoded["data"])


def test_canonical_json_is_the_same_for_equal_events_built_differently() -> None:
    event = a_lease_granted()
    shuffled = dict(reversed(list(event.model_dump().items())))
    shuffled["data"] = dict(reversed(list(shuffled["data"].items())))
    shuffled["occurred_at"] = event.occurred_at.astimezone(timezone(timedelta(hours=-7)))
    rebuilt = LeaseGranted.model_validate(shuffled)
    assert canonical_json(rebuilt) == canonical_json(event)
    assert canonical_json(shuffled) == canonical_json(event)
    assert canonical_json(a_lease_granted(subject_seq=2)) != canonical_json(event)


def test_canonical_json_keeps_non_ascii_text_as_utf8() -> None:
    body = canonical_json({"note": "Grüße ✓"})
    assert body == '{"note":"Grüße ✓"}'.encode()


def test_canonical_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        canonical_json({"cost": float("nan")})


def test_payloads_refuse_nan_and_infinity() -> None:
    with pytest.raises(ValidationError):
        LeaseGrantedData.model_validate(a_grant(ttl_s=float("inf")))


def test_lease_renewed_is_written_at_schema_version_2() -> None:
    event = make_event(
        LeaseRenewed, subject="lease/L9", subject_seq=2, producer="dispatcher/a", actor="service:dispatcher",
        data={"lease_id": "L9", "task_id": "T1", "until": datetime(2025, 6, 1, tzinfo=UTC)},
    )
    assert event.schema_version == 2
    assert parse_event(canonical_json(event)) == event


def test_each_deferral_reason_says_whether_the_task_is_eligible_held_or_waiting_for_gpus() -> None:
    by_kind = {kind: {r.value for r in DeferralReason if r.kind is kind} for kind in WaitKind}
    assert by_kind[WaitKind.NOT_ELIGIBLE] == {"data_not_ready", "unmatched"}
    assert by_kind[WaitKind.HOLD] == {"not_approved", "quota_exhausted", "quota_expires", "quota_not_yet_valid",
                                      "no_quota_account", "deadline_unreachable", "operator", "repeatedly_idle"}
    assert {"no_capacity", "headroom", "reserved", "behind_reservation"} <= by_kind[WaitKind.CAPACITY]


def test_terminal_states() -> None:
    assert TERMINAL_STATES == {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.REJECTED}
    assert [s for s in TaskState if s.is_terminal] == [s for s in TaskState if s in TERMINAL_STATES]
    assert not TaskState.RUNNING.is_terminal and TaskState("held") is TaskState.HELD


def test_subjects_split_back_into_kind_and_id() -> None:
    assert split_subject(task_subject("T/1")) == ("task", "T/1")
    with pytest.raises(ValueError, match="not 'kind/id'"):
        split_subject("T1")
