"""Operators' verbs as pure rules over a `LeaseWork`: hold, release, requeue, priority, drain, undrain.

`apply_operator_request(work, request)` carries out one request (`shared.events.operator`) and
returns None, or a sentence saying why it changes nothing (the request no longer applies: the
handler logs it). Every event it emits is caused by the request, so it names the operator as actor.

- **hold** a waiting task (queued, held for another reason, or not yet queued): `held` with reason
  `operator` (`task.held`); `TaskRecord.in_queue` leaves it out of `plan()`'s queue, and nothing but
  a release puts it back. A leased or running task is not held (requeue it first);
- **release** a task held for a person (an operator's hold, or `repeatedly_idle` after repeated idle
  reclaims: `PERSON_HOLDS`): `queued`, announced again by the next cycle (`task.released`);
- **requeue** a leased or running task: its leases are revoked (`lease.revoked`, reason
  `operator`); when the agent has stopped the run the lease ends and the task is requeued
  (`task.requeued`, reason `operator_requeue`) from its last checkpoint;
- **priority**: the task's priority within its class (`task.priority_changed`); the queue is
  ordered by it from the next cycle;
- **drain** a node: it takes no new leases (`NodeRecord.takes_leases`; `plan()` does not see it),
  the leases running there finish (`node.drained`); **undrain**: it takes leases again.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events.operator import (
    NodeDrained,
    NodeDrainRequested,
    NodeUndrained,
    NodeUndrainRequested,
    TaskHoldRequested,
    TaskPriorityChanged,
    TaskPriorityChangeRequested,
    TaskReleased,
    TaskReleaseRequested,
    TaskRequeueRequested,
)
from shared.events import Envelope, TaskHeld
from shared.events.reasons import RevokeReason
from shared.events.states import TaskState
from shared.events.subjects import node_subject, task_subject
from shared.leasing.records import WAITING_STATES, TaskRecord
from shared.leasing.work import LeaseWork
from shared.scheduling.model import DeferralReason

RUN_STATES = frozenset({TaskState.LEASED, TaskState.RUNNING})


def apply_operator_request(work: LeaseWork, request: Envelope) -> str | None:
    """Carry out one operator request (see the module docstring); None, or why nothing changed."""
    if isinstance(request, NodeDrainRequested | NodeUndrainRequested):
        return _drain(work, request)
    task = work.task(request.data.task_id)
    if task is None or not task.submitted:
        return f"task {request.data.task_id} is not known to the dispatcher; {request.type} changes nothing"
    if task.state.is_terminal or task.cancel_requested:
        what = "being cancelled" if not task.state.is_terminal else task.state.value
        return f"task {task.task_id} is {what}; {request.type} changes nothing"
    if isinstance(request, TaskHoldRequested):
        return _hold(work, task, request)
    if isinstance(request, TaskReleaseRequested):
        return _release(work, task, request)
    if isinstance(request, TaskRequeueRequested):
        return _requeue(work, task, request)
    if isinstance(request, TaskPriorityChangeRequested):
        return _priority(work, task, request)
    raise TypeError(f"not an operator request: {request.type}")


def hold_detail(actor: str, reason: str) -> str:
    """`task.held`'s sentence for an operator's hold."""
    return f"held by {actor}: {reason}"[:2000]


def _hold(work: LeaseWork, task: TaskRecord, request: TaskHoldRequested) -> str | None:
    if task.state in RUN_STATES:
        return f"task {task.task_id} is {task.state.value}; requeue it first, then hold it"
    if task.operator_held:
        return f"task {task.task_id} is already held by an operator ({task.deferral_detail})"
    assert task.state in WAITING_STATES
    detail = hold_detail(request.actor, request.data.reason)
    work.put(replace(task, state=TaskState.HELD, deferral_reason=DeferralReason.OPERATOR, deferral_detail=detail,
                     queued_announced=False, updated_at=work.now))
    work.emit(TaskHeld, task_subject(task.task_id), {
        "task_id": task.task_id, "reason": DeferralReason.OPERATOR, "detail": detail,
    }, cause=request)
    return None


def _release(work: LeaseWork, task: TaskRecord, request: TaskReleaseRequested) -> str | None:
    if not task.held_for_a_person:
        why = f", {task.deferral_reason.value}" if task.deferral_reason is not None else ""
        return f"task {task.task_id} is not held for a person (it is {task.state.value}{why}); nothing to release"
    work.put(replace(task, state=TaskState.QUEUED, deferral_reason=None, deferral_detail=None, queued_announced=False,
                     updated_at=work.now))
    work.emit(TaskReleased, task_subject(task.task_id), {"task_id": task.task_id, "reason": request.data.reason},
              cause=request)
    return None


def _requeue(work: LeaseWork, task: TaskRecord, request: TaskRequeueRequested) -> str | None:
    if task.state not in RUN_STATES:
        return f"task {task.task_id} is {task.state.value}, not leased or running; nothing to requeue"
    detail = f"requeued by {request.actor}: {request.data.reason}"[:2000]
    if not work.revoke(work.leases_of_task(task.task_id), RevokeReason.OPERATOR, detail, cause=request):
        return f"task {task.task_id}'s run is already being stopped; its end requeues or ends it"
    return None


def _priority(work: LeaseWork, task: TaskRecord, request: TaskPriorityChangeRequested) -> str | None:
    priority = request.data.priority
    if task.priority == priority:
        return f"task {task.task_id} already has priority {priority}"
    work.put(replace(task, priority=priority, updated_at=work.now))
    work.emit(TaskPriorityChanged, task_subject(task.task_id), {
        "task_id": task.task_id, "priority": priority, "previous": task.priority, "reason": request.data.reason,
    }, cause=request)
    return None


def _drain(work: LeaseWork, request: NodeDrainRequested | NodeUndrainRequested) -> str | None:
    node_id, reason = request.data.node_id, request.data.reason
    node = work.node(node_id)
    if node is None:
        return f"node {node_id} is not registered; {request.type} changes nothing"
    drain = isinstance(request, NodeDrainRequested)
    if node.drained == drain:
        return f"node {node_id} is already {'drained' if drain else 'taking leases (not drained)'}"
    work.put(replace(node, drained=drain, drain_reason=reason if drain else ""))
    if drain:
        running = [lease.lease_id for lease in work.leases_on_node(node_id)]
        work.emit(NodeDrained, node_subject(node_id), {"node_id": node_id, "reason": reason, "running_leases": running},
                  cause=request)
    else:
        work.emit(NodeUndrained, node_subject(node_id), {"node_id": node_id, "reason": reason}, cause=request)
    return None
