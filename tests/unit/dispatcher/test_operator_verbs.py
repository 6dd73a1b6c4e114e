"""Operators' verbs in the dispatcher's folds (`shared.leasing.operator`, via `task_facets.apply_events`), no PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from shared.events import make_event
from shared.events.operator import (
    NodeDrainRequested,
    NodeUndrainRequested,
    TaskHoldRequested,
    TaskPriorityChangeRequested,
    TaskReleaseRequested,
    TaskRequeueRequested,
)
from shared.events.reasons import ReleaseReason, RequeueReason, RevokeReason
from shared.events.states import TaskState
from shared.events.subjects import node_subject, task_subject
from shared.leasing.lease_end import EndingLease, TaskEffect, Trigger, decide_lease_end
from shared.leasing.plan_effects import apply_plan
from shared.leasing.records import LeaseBook
from shared.leasing.report_fold import apply_reports
from shared.leasing.snapshot import build_queue, build_snapshot
from shared.leasing.task_facets import apply_events, task_ids_of
from shared.leasing.work import LeaseRules
from shared.scheduling.model import DeferralReason, Grant, Placement, Plan
from tests.unit.dispatcher.builders import (
    NOW,
    a_book,
    a_lease_record,
    a_node_record,
    a_ready_task,
    a_task_record,
    cancel_requested,
    matched,
    readiness,
    registered,
)

RULES = LeaseRules()
OPERATOR = "user:planner"
QUEUED = {"state": TaskState.QUEUED, "run": 0, "queued_announced": True}


def request(cls: Any, subject: str, **data: Any) -> Any:
    return make_event(cls, subject=subject, subject_seq=3, producer="console/test", actor=OPERATOR,
                      data={"reason": "maintenance window", **data})


def hold(task_id: str = "T1") -> TaskHoldRequested:
    return request(TaskHoldRequested, task_subject(task_id), task_id=task_id)


def release(task_id: str = "T1") -> TaskReleaseRequested:
    return request(TaskReleaseRequested, task_subject(task_id), task_id=task_id)


def requeue(task_id: str = "T1") -> TaskRequeueRequested:
    return request(TaskRequeueRequested, task_subject(task_id), task_id=task_id)


def priority(value: int, task_id: str = "T1") -> TaskPriorityChangeRequested:
    return request(TaskPriorityChangeRequested, task_subject(task_id), task_id=task_id, priority=value)


def drain(node_id: str = "n1") -> NodeDrainRequested:
    return request(NodeDrainRequested, node_subject(node_id), node_id=node_id)


def undrain(node_id: str = "n1") -> NodeUndrainRequested:
    return request(NodeUndrainRequested, node_subject(node_id), node_id=node_id)


def fold(book: LeaseBook, *events: Any):  # noqa: ANN201
    return apply_events(book, list(events), NOW, RULES)


def kinds(effects: Any) -> list[str]:
    return [e.event_type.model_fields["type"].default for e in effects.changes.emissions]


HELD_BY_OPERATOR = {"state": TaskState.HELD, "deferral_reason": DeferralReason.OPERATOR,
                    "deferral_detail": "held by user:planner: maintenance window", "queued_announced": False}

# (case, the task's record, the request, the events emitted, the task's state after, refused?)
TASK_CASES: list[tuple[str, dict[str, Any], Any, list[str], TaskState, bool]] = [
    ("hold a queued task", QUEUED, hold(), ["task.held"], TaskState.HELD, False),
    ("hold a task held for quota", {"state": TaskState.HELD, "deferral_reason": DeferralReason.QUOTA_EXHAUSTED},
     hold(), ["task.held"], TaskState.HELD, False),
    ("hold a running task: requeue it first", {"state": TaskState.RUNNING}, hold(), [], TaskState.RUNNING, True),
    ("hold a task an operator holds already", HELD_BY_OPERATOR, hold(), [], TaskState.HELD, True),
    ("hold a finished task", {"state": TaskState.SUCCEEDED}, hold(), [], TaskState.SUCCEEDED, True),
    ("hold a task being cancelled", {"state": TaskState.LEASED, "cancel_requested": True}, hold(), [],
     TaskState.LEASED, True),
    ("release a task an operator held", HELD_BY_OPERATOR, release(), ["task.released"], TaskState.QUEUED, False),
    ("release a task held after repeated idle reclaims", {"state": TaskState.HELD,
     "deferral_reason": DeferralReason.REPEATEDLY_IDLE}, release(), ["task.released"], TaskState.QUEUED, False),
    ("release a task held for quota: not an operator's", {"state": TaskState.HELD,
     "deferral_reason": DeferralReason.QUOTA_EXHAUSTED}, release(), [], TaskState.HELD, True),
    ("release a queued task", QUEUED, release(), [], TaskState.QUEUED, True),
    ("requeue a running task", {"state": TaskState.RUNNING}, requeue(), ["command.revoke", "lease.revoked"],
     TaskState.RUNNING, False),
    ("requeue a queued task", QUEUED, requeue(), [], TaskState.QUEUED, True),
    ("requeue a run already being stopped", {"state": TaskState.RUNNING}, requeue(), [], TaskState.RUNNING, True),
    ("priority of a queued task", QUEUED, priority(50), ["task.priority_changed"], TaskState.QUEUED, False),
    ("priority it already has", QUEUED, priority(0), [], TaskState.QUEUED, True),
    ("priority of a failed task", {"state": TaskState.FAILED}, priority(5), [], TaskState.FAILED, True),
]


@pytest.mark.parametrize(("case", "task", "verb", "emitted", "state", "refused"), TASK_CASES,
                         ids=[case[0] for case in TASK_CASES])
def test_task_verbs(case: str, task: dict[str, Any], verb: Any, emitted: list[str], state: TaskState,
                    refused: bool) -> None:  # fmt: skip
    lease = a_lease_record("L1", "T1", revoke_reason=RevokeReason.CANCELLED if "being stopped" in case else None)
    effects = fold(a_book(a_node_record(), a_task_record("T1", **task), lease), verb)
    assert kinds(effects) == emitted
    after = effects.changes.tasks.get("T1") or a_task_record("T1", **task)
    assert after.state is state
    assert bool(effects.refused) == refused
    assert all(e.actor_or("service:dispatcher") == OPERATOR for e in effects.changes.emissions)


def test_a_held_task_leaves_the_queue_with_the_operators_sentence_and_only_a_release_brings_it_back() -> None:
    book = a_book(a_task_record("T1", **QUEUED))
    held = fold(book, hold()).changes.tasks["T1"]
    assert not held.in_queue and held.operator_held and held.deferral_reason is DeferralReason.OPERATOR
    assert held.deferral_detail == "held by user:planner: maintenance window"
    assert build_queue([held]) == []
    # the facets completing again, or a new match, do not put it back
    rematched = fold(a_book(held), readiness("T1", seq=2), matched("T1", seq=2)).changes.tasks["T1"]
    assert not rematched.in_queue
    released = fold(a_book(rematched), release()).changes.tasks["T1"]
    assert released.in_queue and released.state is TaskState.QUEUED and not released.queued_announced
    assert released.deferral_reason is None


def test_a_task_held_before_its_data_is_ready_stays_held_when_it_becomes_ready() -> None:
    [submission, ready, match] = a_ready_task("T1")
    effects = fold(LeaseBook(), submission, hold(), ready, match)
    task = effects.changes.tasks["T1"]
    assert task.complete and task.operator_held and not task.in_queue


def test_a_request_for_an_unknown_task_changes_nothing_and_says_why() -> None:
    effects = fold(LeaseBook(), hold("nope"))
    assert effects.changes.tasks == {} and effects.changes.emissions == ()
    assert effects.refused == ("task nope is not known to the dispatcher; task.hold_requested changes nothing",)


def test_cancelling_an_operator_held_task_cancels_it() -> None:
    effects = fold(a_book(a_task_record("T1", **HELD_BY_OPERATOR)), cancel_requested("T1"))
    assert effects.changes.tasks["T1"].state is TaskState.CANCELLED and kinds(effects) == ["task.cancelled"]


def test_a_requeue_revokes_with_the_operators_reason_and_the_lease_end_requeues_it_from_its_checkpoint() -> None:
    book = a_book(a_node_record(), a_task_record("T1", state=TaskState.RUNNING), a_lease_record("L1", "T1"))
    effects = fold(book, requeue())
    lease = effects.changes.leases["L1"]
    assert lease.revoke_reason is RevokeReason.OPERATOR
    assert effects.changes.emissions[1].data["detail"] == "requeued by user:planner: maintenance window"
    ending = EndingLease(preempting=False, revoke_reason=RevokeReason.OPERATOR, current_run=True,
                         task_state=TaskState.RUNNING, cancel_requested=False, other_parts_active=0)
    end = decide_lease_end(ending, Trigger.FINISHED, exit_code=None, error="revoked: operator")
    assert (end.release, end.effect, end.requeue_reason) == (
        ReleaseReason.REVOKED, TaskEffect.REQUEUE, RequeueReason.OPERATOR_REQUEUE)


def test_a_priority_change_reorders_from_the_next_cycle() -> None:
    effects = fold(a_book(a_task_record("T1", **QUEUED)), priority(-20))
    task = effects.changes.tasks["T1"]
    assert task.priority == -20 and task.queued_task().priority == -20
    assert effects.changes.emissions[0].data == {"task_id": "T1", "priority": -20, "previous": 0,
                                                 "reason": "maintenance window"}


def test_task_requests_name_their_tasks_and_node_requests_none() -> None:
    assert task_ids_of([hold("A"), priority(3, "B"), drain("n1")]) == {"A", "B"}


# ---- drain ---------------------------------------------------------------------------------------


def test_draining_a_node_lists_the_leases_left_to_finish_and_keeps_them() -> None:
    book = a_book(a_node_record(), a_task_record("T1", state=TaskState.RUNNING), a_lease_record("L1", "T1"))
    effects = fold(book, drain())
    node = effects.changes.nodes["n1"]
    assert node.drained and not node.takes_leases and node.drain_reason == "maintenance window"
    assert kinds(effects) == ["node.drained"] and effects.changes.emissions[0].data["running_leases"] == ["L1"]
    assert effects.changes.leases == {} and effects.wake


def test_a_drained_node_is_not_in_plans_snapshot_and_a_grant_there_is_dropped() -> None:
    drained = a_node_record("n1", drained=True)
    fleet = build_snapshot([drained, a_node_record("n2", "a2")], [], {}, [], NOW.timestamp())
    assert [node.node_id for node in fleet.nodes] == ["n2"]
    task = a_task_record("T1", **QUEUED)
    grant = Grant("T1", "H100", (Placement("n1", (0,)),), (NOW + timedelta(minutes=10)).timestamp())
    effects = apply_plan(a_book(drained, task), Plan(grants=(grant,)), NOW, RULES, iter([("L9", 1)]))
    assert effects.leases == 0 and effects.changes.tasks == {}


def test_a_drain_outlives_the_agents_restart() -> None:
    book = a_book(a_node_record(drained=True, drain_reason="bad fan"))
    effects = apply_reports(book, [registered("a1", "n1", gpus=2)], NOW, RULES)
    node = effects.changes.nodes["n1"]
    assert node.drained and node.drain_reason == "bad fan"


@pytest.mark.parametrize(("drained", "verb", "emitted", "after"), [
    (True, undrain(), ["node.undrained"], False),
    (False, undrain(), [], False),
    (True, drain(), [], True),
])
def test_undrain_and_repeats(drained: bool, verb: Any, emitted: list[str], after: bool) -> None:
    effects = fold(a_book(a_node_record(drained=drained)), verb)
    assert kinds(effects) == emitted and bool(effects.refused) == (emitted == [])
    assert (effects.changes.nodes.get("n1") or a_node_record(drained=drained)).drained is after


def test_a_request_for_an_unknown_node_changes_nothing() -> None:
    effects = fold(LeaseBook(), drain("ghost"))
    assert effects.changes.nodes == {} and effects.refused == (
        "node ghost is not registered; node.drain_requested changes nothing",)
