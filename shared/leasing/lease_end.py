"""What the end of a lease does to its task: the one rule the live dispatcher and the simulator share.

A lease ends for one of three triggers: the agent reported the task's process finished, the lease
was not renewed within its TTL, or the agent re-registered without it (it restarted and lost the
task). What happens to the task depends on what the dispatcher had asked for (preempt, revoke,
cancel) and on whether the lease still belongs to the task's current run — a lease of an earlier
run (a task already requeued and leased again) only frees its GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shared.events.reasons import ReleaseReason, RequeueReason, RevokeReason
from shared.events.states import TaskState


class Trigger(StrEnum):
    """Why a lease ends now."""

    FINISHED = "finished"  # the agent reported the process ended (with an exit code)
    EXPIRED = "expired"  # no renewal within the TTL
    AGENT_RESTARTED = "agent_restarted"  # the agent registered again without this lease


class TaskEffect(StrEnum):
    """What the end of a lease does to its task."""

    NONE = "none"  # only the lease ends (older run, other parts still running, task already final)
    SUCCEED = "succeed"
    FAIL = "fail"
    REQUEUE = "requeue"
    CANCEL = "cancel"


class AgentStop(StrEnum):
    """What the agent says about a run it ended early (the prefix of `report.finished`'s error)."""

    NONE = "none"  # the run ended on its own (success, or the task's own failure)
    ON_REQUEST = "on_request"  # "preempted: ..." / "revoked: ...": it obeyed our command
    NOT_STARTED = "not_started"  # "not started (<reason>): ...": the agent refused the grant
    AGENT_STOPPED = "agent_stopped"  # "agent_stopped: ...": the agent daemon shut down


def agent_stop(error: str | None) -> AgentStop:
    """Classify a `report.finished` error by its prefix (see docs/agent.md, Reading report.finished)."""
    if not error:
        return AgentStop.NONE
    if error.startswith("not started"):
        return AgentStop.NOT_STARTED
    if error.startswith(AgentStop.AGENT_STOPPED.value):
        return AgentStop.AGENT_STOPPED
    if error.startswith(("preempted", "revoked")):
        return AgentStop.ON_REQUEST
    return AgentStop.NONE


ACTIVE_TASK_STATES = frozenset({TaskState.LEASED, TaskState.RUNNING})
"""A task in one of these states has a run that a lease end can succeed, fail, requeue or cancel."""


@dataclass(frozen=True, slots=True)
class EndingLease:
    """The facts about an ending lease and its task that decide the outcome."""

    preempting: bool
    revoke_reason: RevokeReason | None
    current_run: bool  # the lease belongs to the task's latest grant
    task_state: TaskState
    cancel_requested: bool
    other_parts_active: int  # other active leases of the same run (multi-node tasks)


@dataclass(frozen=True, slots=True)
class LeaseEnd:
    release: ReleaseReason
    effect: TaskEffect
    requeue_reason: RequeueReason | None = None
    revoke_other_parts: bool = False


def succeeded(exit_code: int | None, error: str | None) -> bool:
    """Exit code 0 is a success unless the agent says it stopped the run (then the task may have
    caught SIGTERM and exited cleanly after a checkpoint)."""
    return exit_code == 0 and agent_stop(error) is AgentStop.NONE


def release_reason(lease: EndingLease, trigger: Trigger, exit_code: int | None, error: str | None = None) -> ReleaseReason:
    """The reason `lease.released` carries."""
    if trigger is Trigger.EXPIRED:
        return ReleaseReason.EXPIRED
    if trigger is Trigger.AGENT_RESTARTED:
        return ReleaseReason.REVOKED
    if succeeded(exit_code, error):
        return ReleaseReason.SUCCEEDED
    if lease.preempting:
        return ReleaseReason.PREEMPTED
    if lease.revoke_reason is RevokeReason.CANCELLED:
        return ReleaseReason.CANCELLED
    if lease.revoke_reason is RevokeReason.RECLAIMED_IDLE:
        return ReleaseReason.RECLAIMED_IDLE
    if lease.revoke_reason is not None:
        return ReleaseReason.REVOKED
    return ReleaseReason.FAILED


def decide_lease_end(
    lease: EndingLease, trigger: Trigger, exit_code: int | None = None, error: str | None = None
) -> LeaseEnd:
    """What ending this lease does to its task (`exit_code`/`error` from `report.finished`)."""
    release = release_reason(lease, trigger, exit_code, error)
    if not lease.current_run or lease.task_state not in ACTIVE_TASK_STATES:
        return LeaseEnd(release, TaskEffect.NONE)
    if release is ReleaseReason.SUCCEEDED:
        return LeaseEnd(release, TaskEffect.SUCCEED if lease.other_parts_active == 0 else TaskEffect.NONE)
    if lease.cancel_requested:
        return LeaseEnd(release, TaskEffect.CANCEL, revoke_other_parts=True)
    requeue = _requeue_reason(lease, trigger, agent_stop(error))
    if requeue is not None:
        return LeaseEnd(release, TaskEffect.REQUEUE, requeue, revoke_other_parts=True)
    return LeaseEnd(release, TaskEffect.FAIL, revoke_other_parts=True)


def _requeue_reason(lease: EndingLease, trigger: Trigger, stop: AgentStop) -> RequeueReason | None:
    if trigger is Trigger.EXPIRED:
        return RequeueReason.LEASE_EXPIRED
    if trigger is Trigger.AGENT_RESTARTED:
        return RequeueReason.AGENT_FAILED
    if lease.preempting:
        return RequeueReason.PREEMPTED
    if lease.revoke_reason is RevokeReason.RECLAIMED_IDLE:
        return RequeueReason.RECLAIMED_IDLE
    if lease.revoke_reason is RevokeReason.OPERATOR:
        return RequeueReason.OPERATOR_REQUEUE
    if lease.revoke_reason is not None:  # stopped on our request (node lost, superseded)
        return RequeueReason.AGENT_FAILED
    if stop is not AgentStop.NONE:  # refused the grant, or shut down: the task itself did not fail
        return RequeueReason.AGENT_FAILED
    return None


NEW_TASK_STATE = {
    TaskEffect.SUCCEED: TaskState.SUCCEEDED, TaskEffect.FAIL: TaskState.FAILED, TaskEffect.CANCEL: TaskState.CANCELLED,
    TaskEffect.REQUEUE: TaskState.QUEUED,
}
"""The task's state after a lease end with this effect (`TaskEffect.NONE` leaves it as it is)."""

REQUEUE_DETAIL = {
    RequeueReason.PREEMPTED: "the task checkpointed and yielded its GPUs to higher-class work",
    RequeueReason.LEASE_EXPIRED: "the agent did not renew the lease within its TTL",
    RequeueReason.RECLAIMED_IDLE: "its GPUs stayed idle too long",
    RequeueReason.AGENT_FAILED: "the agent lost the task (it restarted, or stopped it on the dispatcher's request)",
    RequeueReason.OPERATOR_REQUEUE: "an operator stopped the run and queued the task again",
}
"""The sentence `task.requeued` carries beside its reason."""
