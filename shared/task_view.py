"""What the console shows about one task (`TaskView`) and the reasons the projection itself gives
(`ViewReason`); `shared.projection` folds a task's events into it."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from shared.events.states import TaskState
from shared.scheduling.model import PriorityClass

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ViewReason(StrEnum):
    """Machine reasons the projection itself gives; held/unmatchable/requeued tasks carry the
    owning service's reason value instead (`DeferralReason`, `UnmatchableReason`, `RequeueReason`)."""

    AWAITING_READINESS = "awaiting_readiness"  # submitted; readiness has not checked its inputs yet
    AWAITING_MATCH = "awaiting_match"  # inputs ready; the matcher has not chosen a card type yet
    AWAITING_DISPATCH = "awaiting_dispatch"  # ready and matched; the dispatcher has not queued it yet
    DATA_NOT_READY = "data_not_ready"  # some inputs are missing (listed in missing_inputs)
    QUEUED = "queued"  # in the dispatcher's queue, waiting for GPUs
    LEASED = "leased"  # GPUs granted, the agent has not reported the start
    RUNNING = "running"  # the agent reported the task running
    CANCEL_REQUESTED = "cancel_requested"  # someone asked to cancel; the dispatcher has not yet
    SUCCEEDED = "succeeded"
    SUCCEEDED_FLAGGED = "succeeded_flagged"  # succeeded, but the dispatcher flagged the success (flags listed)
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"  # intake refused the submission (problems listed)


class MatchSummary(BaseModel):
    """The matcher's choice: card type, its estimated runtime and cost, and why."""

    model_config = _FROZEN

    card_type: str
    est_runtime_s: float
    est_cost: float
    oversized: bool = False
    why: str = ""
    alternatives: int = Field(0, description="other adequate card types ranked")


class RejectionProblem(BaseModel):
    """One reason intake refused the submission."""

    model_config = _FROZEN

    field: str
    value: Any = None
    problem: str


class DispatchStatus(BaseModel):
    """The dispatcher's facet: where the task is in the queue/lease/run cycle, and why."""

    model_config = _FROZEN

    state: TaskState
    reason: str
    detail: str


class TaskView(BaseModel):
    """Everything the console shows about one task. Derived fields come first."""

    model_config = _FROZEN

    id: str
    # derived from the facets after every event (see derive_status)
    state: TaskState = TaskState.SUBMITTED
    reason: str = ViewReason.AWAITING_READINESS.value
    reason_detail: str = ""
    card_type: str | None = Field(None, description="leased card type, else the matcher's choice")
    # intake facet
    name: str | None = None
    idempotency_key: str | None = None
    project: str | None = None
    priority_class: PriorityClass | None = None
    priority: int | None = None
    gpus: int | None = None
    submitted_at: AwareDatetime | None = None
    submitted_by: str | None = None
    template: str | None = Field(None, description="the template applied at intake, pinned: name@version")
    submission: dict[str, Any] | None = Field(None, description="the resolved submission (template applied), as stored")
    problems: tuple[RejectionProblem, ...] = ()
    cancel_requested: bool = False
    cancel_reason: str = ""
    # readiness facet
    ready: bool | None = None
    ready_fraction: float | None = None
    missing_inputs: tuple[str, ...] = ()
    # matcher facet
    match: MatchSummary | None = None
    unmatchable: DispatchStatus | None = Field(None, description="the matcher's reason, when no card fits")
    # dispatcher facet
    dispatch: DispatchStatus | None = None
    approved: bool = False
    lease_id: str | None = None
    node_id: str | None = None
    leased_card_type: str | None = None
    gpu_indices: tuple[int, ...] = ()
    attempts: int = Field(0, description="times the task was leased GPUs")
    start_reason: str | None = Field(None, description="why its last lease started then: in_order, backfill,"
                                     " reservation or preemption (lease.granted)")
    passed: int = Field(0, description="tasks earlier in the queue order still waiting when its last lease started")
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    progress: float | None = None
    last_checkpoint: str | None = None
    output_units: float | None = None
    flags: tuple[str, ...] = Field((), description="why its success is not taken at the agent's word"
                                   " (task.succeeded flags: implausibly_early_success, output_out_of_bounds)")
    # ledger facet
    used_gpu_hours: float = 0.0
    used_cost: float = 0.0
    # bookkeeping
    seqs: dict[str, int] = Field(default_factory=dict, description="last subject_seq per owner:subject")
    events: int = Field(0, description="events applied")
    last_event_type: str | None = None
    last_event_at: AwareDatetime | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal


def output_units_text(units: float) -> str:
    """A task's output count as people write it, in any sentence of either language: 1,274,375 (not 1.27438e+06),
    1,274,375.5, 0.125."""
    if not math.isfinite(units):
        return f"{units:g}"
    if units == int(units):
        return f"{int(units):,}"
    text = f"{units:,.6f}".rstrip("0").rstrip(".")
    return text if text.strip("-0") else f"{units:g}"  # below a millionth: 2.5e-07
