"""The events that tell a lease's end, built from the decision `lease_end.decide_lease_end` made.

`LeaseWork.end_lease` decides and records; this module only says which events carry the end and what
they say: `lease.expired` when the TTL ran out, `lease.released` with how the lease ended, and the
task's own event (`task.succeeded` / `task.failed`, which carry the `lease.released` facts instead of a
`lease.released` of their own; `task.cancelled`; `task.requeued`). Pure: no clock, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from shared.events import (
    Envelope,
    LeaseExpired,
    LeaseReleased,
    TaskCancelled,
    TaskFailed,
    TaskRequeued,
    TaskSucceeded,
)
from shared.events.states import TaskState
from shared.events.subjects import lease_subject, task_subject
from shared.leasing.lease_end import REQUEUE_DETAIL, LeaseEnd, TaskEffect, Trigger
from shared.leasing.records import LeaseRecord, TaskRecord
from shared.leasing.run_outcome import RunOutcome

RUN_END_EFFECTS = frozenset({TaskEffect.SUCCEED, TaskEffect.FAIL})
"""The task effects whose event (`task.succeeded` / `task.failed`) carries the lease's end instead of a
`lease.released` of its own (`shared.events.carried`)."""


class EndEvent(NamedTuple):
    """One event of a lease's end: its type, subject and payload."""

    event_type: type[Envelope]
    subject: str
    data: dict[str, Any]


def lease_end_events(lease: LeaseRecord, trigger: Trigger, release: dict[str, Any] | None) -> list[EndEvent]:
    """`lease.expired` when the TTL ran out; `lease.released` unless the task's event carries it (None)."""
    subject, events = lease_subject(lease.lease_id), []
    if trigger is Trigger.EXPIRED:
        events.append(EndEvent(LeaseExpired, subject, {
            "lease_id": lease.lease_id, "task_id": lease.task_id, "last_renewed_at": lease.last_renewed_at,
        }))
    if release is not None:
        events.append(EndEvent(LeaseReleased, subject, {"lease_id": lease.lease_id, "task_id": lease.task_id} | release))
    return events


def task_effect_event(lease: LeaseRecord, task: TaskRecord, decision: LeaseEnd, outcome: RunOutcome,
                      release: dict[str, Any] | None) -> EndEvent:
    """The task's event for the decision's effect (not `TaskEffect.NONE`); `release` is what a run's end carries."""
    effect, task_id, lease_id = decision.effect, task.task_id, lease.lease_id
    subject = task_subject(task_id)
    if effect in RUN_END_EFFECTS:
        if effect is TaskEffect.SUCCEED:
            kind, data = TaskSucceeded, outcome.succeeded_data(task_id, lease_id)
        else:
            error = outcome.error or f"the task exited with code {outcome.exit_code}"
            kind, data = TaskFailed, {"task_id": task_id, "lease_id": lease_id, "error": error,
                                      "exit_code": outcome.exit_code}
        if task.state is TaskState.LEASED:  # no report before the end: the start rides on the end
            data["started"] = run_start(lease)
        return EndEvent(kind, subject, data | {"released": release})
    if effect is TaskEffect.CANCEL:
        return EndEvent(TaskCancelled, subject, {"task_id": task_id, "lease_id": lease_id,
                                                 "reason": task.cancel_reason})
    assert decision.requeue_reason is not None
    return EndEvent(TaskRequeued, subject, {
        "task_id": task_id, "lease_id": lease_id, "reason": decision.requeue_reason,
        "resume_from": task.resume_from, "detail": REQUEUE_DETAIL[decision.requeue_reason],
    })


def started_data(lease: LeaseRecord) -> dict[str, Any]:
    """`task.started`'s payload for a run under `lease`."""
    return {"task_id": lease.task_id, "lease_id": lease.lease_id} | run_start(lease)


def run_start(lease: LeaseRecord) -> dict[str, Any]:
    """Where the run under `lease` started (`task.started`'s facts; `started` of `task.succeeded` or `task.failed`
    when carried)."""
    return {"node_id": lease.node_id, "resumed_from": lease.resume_from}


def lease_release(lease: LeaseRecord, decision: LeaseEnd, ended_at: datetime) -> dict[str, Any]:
    """How `lease` ended (`lease.released`'s facts beside its ids; `released` of the run's end when carried)."""
    return {
        "node_id": lease.node_id, "card_type": lease.card_type, "gpus": len(lease.gpu_indices),
        "granted_at": lease.granted_at, "ended_at": ended_at, "reason": decision.release,
        "idle_gpu_seconds": lease.idle_gpu_seconds,
        "gpu_util_pct": lease.util_pct_sum / lease.util_readings if lease.util_readings else None,
        "last_checkpoint_at": lease.last_checkpoint_at,
    }
