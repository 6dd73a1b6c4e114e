"""Task events the dispatcher writes: queueing, holds, approval, and a run's start and end.

Three transitions are sometimes carried by the event of the next one instead of an event of their own
(one outbox row, stream entry, archive row and history row fewer per task), never dropped:

- a task granted GPUs in the cycle that first finds it eligible enters the queue and leaves it at
  once: its `lease.granted` carries the entry (`QueueEntry`, `LeaseGrantedData.queued`) and no
  `task.queued` is written;
- a run whose first report is its end starts and ends at once: its `task.succeeded` or `task.failed`
  carries the start (`RunStart`, `TaskSucceededData.started`, `TaskFailedData.started`) and no
  `task.started` is written;
- a run's end ends its lease: its `task.succeeded` or `task.failed` carries the lease's end
  (`LeaseRelease`, `TaskSucceededData.released`, `TaskFailedData.released`) and no `lease.released` is
  written.

Readers (the projection, the audit story, the console's history) tell a carried transition as if
its own event had come just before its carrier, at the same time; those that fold lease ends (the
ledger, the views' lease rows, audit replay) apply a carried release as its own event
(`shared.events.carried`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from shared.events.envelope import Envelope, Payload
from shared.events.reasons import ReleaseReason, RequeueReason, SuccessFlag
from shared.events.values import Detail, EntityId, Fraction, NonNegative
from shared.scheduling.model import DeferralReason, PriorityClass


class QueueEntry(Payload):
    """What a task entered the queue with (`task.queued`'s facts beside its id)."""

    project: EntityId
    priority_class: PriorityClass
    priority: int


class TaskQueuedData(Payload):
    task_id: EntityId
    project: EntityId
    priority_class: PriorityClass
    priority: int


class TaskQueued(Envelope):
    """The task is ready and matched and waits for GPUs."""

    type: Literal["task.queued"] = "task.queued"
    data: TaskQueuedData


class TaskHeldData(Payload):
    task_id: EntityId
    reason: DeferralReason
    detail: Detail


class TaskHeld(Envelope):
    """The task may not start until quota, approval, deadline or an operator allows it."""

    type: Literal["task.held"] = "task.held"
    data: TaskHeldData


class TaskApprovedData(Payload):
    task_id: EntityId
    note: Detail = Field("", description="the reviewer's reason")


class TaskApproved(Envelope):
    """A reviewer (the actor) approved a task that policy requires approval for: it may start."""

    type: Literal["task.approved"] = "task.approved"
    data: TaskApprovedData


class TaskDeniedData(Payload):
    task_id: EntityId
    reason: Detail = Field(description="the reviewer's reason")


class TaskDenied(Envelope):
    """A reviewer (the actor) denied a task that waited for approval: it will not run (`task.cancelled` follows)."""

    type: Literal["task.denied"] = "task.denied"
    data: TaskDeniedData


class TaskDeadlineEndangeredData(Payload):
    task_id: EntityId
    deadline: AwareDatetime
    estimated_start: AwareDatetime | None = Field(None, description="from the plan's reservations (None: not estimated)")
    estimated_end: AwareDatetime | None = None
    detail: Detail


class TaskDeadlineEndangered(Envelope):
    """A waiting task's estimated end is past its deadline (raised once per time it becomes at risk)."""

    type: Literal["task.deadline_endangered"] = "task.deadline_endangered"
    data: TaskDeadlineEndangeredData


class TaskQuotaEndangeredData(Payload):
    task_id: EntityId
    account_id: EntityId
    project: EntityId
    valid_to: AwareDatetime = Field(description="when the account expires")
    estimated_end: AwareDatetime | None = Field(None, description="the task's estimated end from the current plan")
    days_left: float = Field(description="days until the account expires")
    covered: bool = Field(description="False: the account's GPU-hours left do not cover the task")
    detail: Detail


class TaskQuotaEndangered(Envelope):
    """A waiting core task will end within its quota account's alert lead of the account's expiry, or the
    account will not cover it — raised before it starts, and again at each reminder as the date nears."""

    type: Literal["task.quota_endangered"] = "task.quota_endangered"
    data: TaskQuotaEndangeredData


class TaskApprovalDelayedData(Payload):
    task_id: EntityId
    waiting_since: AwareDatetime
    detail: Detail


class TaskApprovalDelayed(Envelope):
    """A task has waited longer than the policy allows for a reviewer's approval (raised once)."""

    type: Literal["task.approval_delayed"] = "task.approval_delayed"
    data: TaskApprovalDelayedData


class RunStart(Payload):
    """Where a run started (`task.started`'s facts beside its task and lease)."""

    node_id: EntityId
    resumed_from: str | None = Field(None, description="checkpoint the run resumed from, if any")


class LeaseRelease(Payload):
    """How a lease ended (`lease.released`'s facts beside its lease and task)."""

    node_id: EntityId
    card_type: EntityId
    gpus: int = Field(ge=1, description="number of GPUs the lease held")
    granted_at: AwareDatetime
    ended_at: AwareDatetime
    reason: ReleaseReason
    idle_gpu_seconds: NonNegative = Field(0.0, description="idle GPU-seconds since the last lease.renewed")
    gpu_util_pct: float | None = Field(
        None, ge=0, le=100, description="mean utilisation of the lease's GPUs over the heartbeats since the last"
        " lease.renewed (None: not reported)",
    )
    last_checkpoint_at: AwareDatetime | None = Field(
        None, description="when the dispatcher applied the run's last checkpoint (None: it never checkpointed);"
        " the ledger counts a preempted or lost run's loss from here",
    )


class TaskStartedData(Payload):
    task_id: EntityId
    lease_id: EntityId
    node_id: EntityId
    resumed_from: str | None = Field(None, description="checkpoint the run resumed from, if any")


class TaskStarted(Envelope):
    """The agent holding the lease reported the task running."""

    type: Literal["task.started"] = "task.started"
    data: TaskStartedData


class TaskCheckpointedData(Payload):
    task_id: EntityId
    lease_id: EntityId
    checkpoint_uri: str = Field(min_length=1, description="where the checkpoint is, e.g. s3://bucket/key")
    checksum: str | None = Field(None, description="checksum of the checkpoint's manifest, if reported")
    progress: Fraction | None = Field(None, description="share of the task done at the checkpoint")
    output_units: NonNegative | None = Field(
        None, description="cumulative output of this run (lease) at the checkpoint, in the task's unit"
    )


class TaskCheckpointed(Envelope):
    """The task wrote a checkpoint it can resume from."""

    type: Literal["task.checkpointed"] = "task.checkpointed"
    data: TaskCheckpointedData


class TaskSucceededData(Payload):
    task_id: EntityId
    lease_id: EntityId
    output_units: NonNegative | None = Field(
        None, description="output the task reported, in its unit; empty when the claim was refused (output_out_of_bounds)")
    flags: tuple[SuccessFlag, ...] = Field(
        (), description="why the success is not taken at the agent's word (empty: it is); its output"
        " is then not counted as real output by the ledger")
    flag_detail: Detail = Field("", description="the flags' sentences")
    claimed_output_units: NonNegative | None = Field(
        None, description="the output the agent claimed when it was refused as out of bounds")
    started: RunStart | None = Field(
        None, description="the run's start, carried here when the agent's first report about the lease was its"
        " end: the run started at this event's time and no `task.started` was written (None: one was)")
    released: LeaseRelease | None = Field(
        None, description="how the run's lease ended, carried here when the report that ended the run ended its"
        " lease: no `lease.released` was written for it (None: one was, or the task never ran)")


class TaskSucceeded(Envelope):
    """The task finished with exit code 0."""

    type: Literal["task.succeeded"] = "task.succeeded"
    data: TaskSucceededData


class TaskFailedData(Payload):
    task_id: EntityId
    lease_id: EntityId | None = Field(None, description="the lease it failed under; None if it never ran")
    error: Detail
    exit_code: int | None = Field(None, description="process exit code; None if it had none (killed)")
    started: RunStart | None = Field(
        None, description="the run's start, carried here when the agent's first report about the lease was its"
        " end: the run started at this event's time and no `task.started` was written (None: one was, or the"
        " task never ran)")
    released: LeaseRelease | None = Field(
        None, description="how the run's lease ended, carried here when the report that ended the run ended its"
        " lease: no `lease.released` was written for it (None: one was, or the task never ran)")


class TaskFailed(Envelope):
    """The task finished with an error and will not be retried."""

    type: Literal["task.failed"] = "task.failed"
    data: TaskFailedData


class TaskRequeuedData(Payload):
    task_id: EntityId
    lease_id: EntityId = Field(description="the lease that ended")
    reason: RequeueReason
    detail: Detail = ""
    resume_from: str | None = Field(None, description="last checkpoint; None = start over")


class TaskRequeued(Envelope):
    """The task lost its lease and waits for GPUs again, resuming from its last checkpoint."""

    type: Literal["task.requeued"] = "task.requeued"
    data: TaskRequeuedData


class TaskCancelledData(Payload):
    task_id: EntityId
    lease_id: EntityId | None = Field(None, description="the lease revoked to stop it, if it was running")
    reason: Detail = ""


class TaskCancelled(Envelope):
    """The task was cancelled and will not run (again)."""

    type: Literal["task.cancelled"] = "task.cancelled"
    data: TaskCancelledData
