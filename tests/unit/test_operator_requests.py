"""The API side of operators' verbs (pure): which requests the views already say are pointless, how
the projection shows holds, releases and priority changes, which task a reference names, node states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.operator.nodes import node_state
from services.operator.task_refs import Ambiguous, MatchedBy, TaskCandidate, TaskRef, choose_task
from services.operator.verbs import NodeVerb, TaskVerb, node_verb_refusal, task_verb_refusal
from shared.events import make_event
from shared.events.states import TaskState
from shared.events.subjects import task_subject
from shared.projection import evolve
from shared.task_view import TaskView

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def a_view(state: TaskState, reason: str = "queued", **fields: Any) -> TaskView:
    return TaskView(id="T1", state=state, reason=reason, reason_detail="why", priority=0, **fields)


VIEW_CASES: list[tuple[TaskVerb, TaskView, int | None, str | None]] = [
    (TaskVerb.HOLD, a_view(TaskState.QUEUED), None, None),
    (TaskVerb.HOLD, a_view(TaskState.WAITING_DATA, "data_not_ready"), None, None),
    (TaskVerb.HOLD, a_view(TaskState.RUNNING, "running"), None, "requeue it first"),
    (TaskVerb.HOLD, a_view(TaskState.HELD, "operator"), None, "already held by an operator"),
    (TaskVerb.HOLD, a_view(TaskState.SUCCEEDED, "succeeded"), None, "is succeeded"),
    (TaskVerb.HOLD, a_view(TaskState.QUEUED, cancel_requested=True), None, "being cancelled"),
    (TaskVerb.RELEASE, a_view(TaskState.HELD, "operator"), None, None),
    (TaskVerb.RELEASE, a_view(TaskState.HELD, "quota_exhausted"), None, "not held for a person"),
    (TaskVerb.REQUEUE, a_view(TaskState.LEASED, "leased"), None, None),
    (TaskVerb.REQUEUE, a_view(TaskState.QUEUED), None, "nothing to requeue"),
    (TaskVerb.PRIORITY, a_view(TaskState.RUNNING, "running"), 5, None),
    (TaskVerb.PRIORITY, a_view(TaskState.QUEUED), 0, "already has priority 0"),
    (TaskVerb.PRIORITY, a_view(TaskState.CANCELLED, "cancelled"), 5, "is cancelled"),
]


@pytest.mark.parametrize(("verb", "view", "priority", "refused"), VIEW_CASES)
def test_requests_the_views_already_refuse(verb: TaskVerb, view: TaskView, priority: int | None,
                                           refused: str | None) -> None:  # fmt: skip
    refusal = task_verb_refusal(verb, view, priority)
    assert refusal is None if refused is None else refused in (refusal or "")


@pytest.mark.parametrize(("verb", "drained", "refused"), [
    (NodeVerb.DRAIN, False, False), (NodeVerb.DRAIN, True, True), (NodeVerb.UNDRAIN, True, False),
    (NodeVerb.UNDRAIN, False, True),
])
def test_node_requests(verb: NodeVerb, drained: bool, refused: bool) -> None:
    row = {"node_id": "n1", "drained": drained, "drained_by": "user:ops", "drain_reason": "fan"}
    assert (node_verb_refusal(verb, row) is not None) == refused


@pytest.mark.parametrize(("alive", "drained", "used", "state"), [
    (True, False, 3, "up"), (False, True, 0, "lost"), (True, True, 2, "draining"), (True, True, 0, "drained"),
])
def test_node_states_like_sinfo(alive: bool, drained: bool, used: int, state: str) -> None:
    assert node_state(alive, drained, used) == state


# ---- the projection ------------------------------------------------------------------------------


def event(type_: str, producer: str, data: dict[str, Any], seq: int, actor: str = "user:planner") -> Any:
    return make_event(type_, subject=task_subject("T1"), subject_seq=seq, producer=producer, actor=actor, data=data,
                      occurred_at=T0 + timedelta(seconds=seq))


SUBMITTED = event("task.submitted", "intake/x", {"task_id": "T1", "idempotency_key": "k", "submission": {
    "name": "n", "project": "p", "priority_class": "standard", "priority": 3, "gpus": 1, "estimate_gpu_hours": 1.0,
    "profile": "compute"}}, 1, actor="user:sam")
NOT_READY = event("task.readiness_changed", "readiness/x", {"task_id": "T1", "ready": False, "ready_fraction": 0.0,
                                                           "missing_inputs": ["s3://bucket/data/part-1"]}, 1)
HELD = event("task.held", "dispatcher/x", {"task_id": "T1", "reason": "operator", "detail": "held by user:planner: fan"}, 1)
RELEASED = event("task.released", "dispatcher/x", {"task_id": "T1", "reason": "fixed"}, 2)
PRIORITY = event("task.priority_changed", "dispatcher/x", {"task_id": "T1", "priority": 9, "previous": 3,
                                                           "reason": "deadline"}, 3)


def project(*events: Any) -> TaskView:
    view = None
    for e in events:
        view = evolve(view, e)
    assert view is not None
    return view


def test_an_operators_hold_shows_even_while_data_is_missing_and_a_release_ends_it() -> None:
    held = project(SUBMITTED, NOT_READY, HELD)
    assert (held.state, held.reason, held.reason_detail) == (TaskState.HELD, "operator", "held by user:planner: fan")
    released = project(SUBMITTED, HELD, RELEASED)
    assert (released.state, released.reason) == (TaskState.QUEUED, "queued")
    assert released.reason_detail == "released by user:planner: fixed; back in the queue for GPUs"


def test_a_priority_change_wins_whichever_arrives_first() -> None:
    assert project(SUBMITTED, PRIORITY).priority == 9
    assert project(PRIORITY, SUBMITTED).priority == 9


# ---- task references -----------------------------------------------------------------------------


def candidate(task_id: str, key: str | None = None, name: str | None = None, minutes: int = 0,
              rejected: bool = False) -> TaskCandidate:  # fmt: skip
    return TaskCandidate(task_id, key, name, T0 + timedelta(minutes=minutes), rejected)


REF_CASES: list[tuple[str, list[TaskCandidate], TaskRef | str | None]] = [
    ("T1", [candidate("T1", name="x"), candidate("T2", name="T1")], TaskRef("T1", MatchedBy.ID)),
    ("k1", [candidate("R9", key="k1", rejected=True, minutes=5), candidate("T1", key="k1")],
     TaskRef("T1", MatchedBy.IDEMPOTENCY_KEY)),
    ("k1", [candidate("R9", key="k1", rejected=True)], TaskRef("R9", MatchedBy.IDEMPOTENCY_KEY)),
    ("train", [candidate("T1", name="train")], TaskRef("T1", MatchedBy.NAME)),
    ("train", [candidate("T1", name="train"), candidate("T2", name="train", minutes=1)], "2 tasks are named 'train'"),
    ("nope", [], None),
]


@pytest.mark.parametrize(("ref", "candidates", "expected"), REF_CASES)
def test_which_task_a_reference_names(ref: str, candidates: list[TaskCandidate], expected: TaskRef | str | None) -> None:
    found = choose_task(ref, candidates)
    if isinstance(expected, str):
        assert isinstance(found, Ambiguous) and found.sentence().startswith(expected)
        assert "T2 (2026-01-01 00:01), T1" in found.sentence()  # newest first
    else:
        assert found == expected
