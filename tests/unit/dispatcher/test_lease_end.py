"""What a lease's end does to its task (`shared.leasing.lease_end`)."""

from __future__ import annotations

import pytest

from shared.leasing.lease_end import (
    AgentStop,
    EndingLease,
    LeaseEnd,
    TaskEffect,
    Trigger,
    agent_stop,
    decide_lease_end,
)
from shared.events.reasons import ReleaseReason as Rel
from shared.events.reasons import RequeueReason as Req
from shared.events.reasons import RevokeReason as Rev
from shared.events.states import TaskState
from shared.simulation.transitions import LeaseEndCause, lease_end_effect

RUNNING = EndingLease(preempting=False, revoke_reason=None, current_run=True, task_state=TaskState.RUNNING,
                      cancel_requested=False, other_parts_active=0)


def lease(**changes: object) -> EndingLease:
    return EndingLease(**{**{f: getattr(RUNNING, f) for f in RUNNING.__slots__}, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ending", "trigger", "exit_code", "expected"),
    [
        (RUNNING, Trigger.FINISHED, 0, LeaseEnd(Rel.SUCCEEDED, TaskEffect.SUCCEED)),
        (RUNNING, Trigger.FINISHED, 1, LeaseEnd(Rel.FAILED, TaskEffect.FAIL, revoke_other_parts=True)),
        (RUNNING, Trigger.FINISHED, None, LeaseEnd(Rel.FAILED, TaskEffect.FAIL, revoke_other_parts=True)),
        (lease(preempting=True), Trigger.FINISHED, 143,
         LeaseEnd(Rel.PREEMPTED, TaskEffect.REQUEUE, Req.PREEMPTED, revoke_other_parts=True)),
        (lease(preempting=True), Trigger.FINISHED, 0, LeaseEnd(Rel.SUCCEEDED, TaskEffect.SUCCEED)),
        (lease(revoke_reason=Rev.CANCELLED, cancel_requested=True), Trigger.FINISHED, 143,
         LeaseEnd(Rel.CANCELLED, TaskEffect.CANCEL, revoke_other_parts=True)),
        (lease(revoke_reason=Rev.RECLAIMED_IDLE), Trigger.FINISHED, 143,
         LeaseEnd(Rel.RECLAIMED_IDLE, TaskEffect.REQUEUE, Req.RECLAIMED_IDLE, revoke_other_parts=True)),
        (lease(revoke_reason=Rev.NODE_LOST), Trigger.FINISHED, 143,
         LeaseEnd(Rel.REVOKED, TaskEffect.REQUEUE, Req.AGENT_FAILED, revoke_other_parts=True)),
        (RUNNING, Trigger.EXPIRED, None,
         LeaseEnd(Rel.EXPIRED, TaskEffect.REQUEUE, Req.LEASE_EXPIRED, revoke_other_parts=True)),
        (lease(cancel_requested=True, revoke_reason=Rev.CANCELLED), Trigger.EXPIRED, None,
         LeaseEnd(Rel.EXPIRED, TaskEffect.CANCEL, revoke_other_parts=True)),
        (lease(task_state=TaskState.LEASED), Trigger.AGENT_RESTARTED, None,
         LeaseEnd(Rel.REVOKED, TaskEffect.REQUEUE, Req.AGENT_FAILED, revoke_other_parts=True)),
        # a lease of an earlier run, or of a task already final, only frees its GPUs
        (lease(current_run=False), Trigger.FINISHED, 1, LeaseEnd(Rel.FAILED, TaskEffect.NONE)),
        (lease(task_state=TaskState.CANCELLED), Trigger.EXPIRED, None, LeaseEnd(Rel.EXPIRED, TaskEffect.NONE)),
        # a multi-node task succeeds when its last part does
        (lease(other_parts_active=1), Trigger.FINISHED, 0, LeaseEnd(Rel.SUCCEEDED, TaskEffect.NONE)),
    ],
)
def test_what_the_end_of_a_lease_does_to_its_task(
    ending: EndingLease, trigger: Trigger, exit_code: int | None, expected: LeaseEnd
) -> None:
    assert decide_lease_end(ending, trigger, exit_code) == expected


@pytest.mark.parametrize(
    ("ending", "exit_code", "error", "expected"),
    [
        # the agent refused the grant or shut down: the task did not fail, it goes back to the queue
        (lease(task_state=TaskState.LEASED), None, "not started (gpus_busy): GPU 1 runs lease L0",
         LeaseEnd(Rel.FAILED, TaskEffect.REQUEUE, Req.AGENT_FAILED, revoke_other_parts=True)),
        (RUNNING, None, "agent_stopped: SIGTERM",
         LeaseEnd(Rel.FAILED, TaskEffect.REQUEUE, Req.AGENT_FAILED, revoke_other_parts=True)),
        # a task that caught SIGTERM on preemption and exited 0 did not succeed
        (lease(preempting=True), 0, "preempted: core task T9 needs the GPUs",
         LeaseEnd(Rel.PREEMPTED, TaskEffect.REQUEUE, Req.PREEMPTED, revoke_other_parts=True)),
        # ... but one that really ended while the preemption was on its way did
        (lease(preempting=True), 0, None, LeaseEnd(Rel.SUCCEEDED, TaskEffect.SUCCEED)),
        (RUNNING, 3, "simulated failure at progress 0.5", LeaseEnd(Rel.FAILED, TaskEffect.FAIL, revoke_other_parts=True)),
        (lease(cancel_requested=True, revoke_reason=Rev.CANCELLED), 0, "revoked: cancelled: the task was cancelled",
         LeaseEnd(Rel.CANCELLED, TaskEffect.CANCEL, revoke_other_parts=True)),
    ],
)
def test_the_agents_error_prefix_tells_a_stop_from_a_failure(
    ending: EndingLease, exit_code: int | None, error: str, expected: LeaseEnd
) -> None:
    assert decide_lease_end(ending, Trigger.FINISHED, exit_code, error) == expected


@pytest.mark.parametrize(
    ("error", "stop"),
    [(None, AgentStop.NONE), ("", AgentStop.NONE), ("exit code 2; Traceback ...", AgentStop.NONE),
     ("preempted: core work", AgentStop.ON_REQUEST), ("revoked: cancelled: x", AgentStop.ON_REQUEST),
     ("not started (expired): ...", AgentStop.NOT_STARTED), ("agent_stopped: shutdown", AgentStop.AGENT_STOPPED)],
)
def test_agent_stop_reads_the_error_prefix(error: str | None, stop: AgentStop) -> None:
    assert agent_stop(error) is stop


def test_the_simulator_ends_leases_by_the_same_rule() -> None:
    assert {cause: lease_end_effect(cause) for cause in LeaseEndCause} == {
        LeaseEndCause.RAN_TO_THE_END: TaskEffect.SUCCEED, LeaseEndCause.PREEMPTED: TaskEffect.REQUEUE,
        LeaseEndCause.CUT_OFF: TaskEffect.FAIL,
    }
