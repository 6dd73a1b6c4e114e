"""The dispatcher's state as frozen records: what the pure folds read and return.

One record per row of the dispatcher's tables (`services/dispatcher/sql`): `TaskRecord` (a task's
facets and the dispatcher's own state of it), `LeaseRecord`, `NodeRecord`. A fold never changes a
record; it returns new ones (`dataclasses.replace`), and the handler saves them and keeps them
as the leader's working state. `LeaseBook` is what a fold reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.events.reasons import NodeMode, ReleaseReason, RevokeReason
from shared.events.states import TaskState
from shared.scheduling.model import CardOption, DeferralReason, PriorityClass, QueuedTask
from shared.scheduling.quota_balance import QuotaTerms

WAITING_STATES = frozenset({TaskState.QUEUED, TaskState.HELD})
"""States of a task in the queue (waiting for `plan()` to grant it)."""

PERSON_HOLDS = frozenset({DeferralReason.OPERATOR, DeferralReason.REPEATEDLY_IDLE})
"""Holds only a person lifts: a task held for one of these reasons is not planned at all."""


class LeaseState(StrEnum):
    """A lease is active until it ends, once, with a `ReleaseReason`."""

    ACTIVE = "active"  # the agent holds the GPUs
    ENDED = "ended"  # released (`lease.released`); its GPUs are free


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task as the dispatcher knows it: the facets other services own, then its own state."""

    task_id: str
    # task.submitted (intake)
    submitted: bool = False
    project: str | None = None
    priority_class: PriorityClass | None = None
    priority: int | None = None
    gpus: int | None = None
    heavy: bool | None = None
    checkpoint_interval_s: float | None = None
    estimate_gpu_hours: float | None = None
    submitted_at: datetime | None = None
    command: Any = None  # argv list or shell string
    env: Mapping[str, str] | None = None
    image: str | None = None
    output_unit: str | None = None
    labels: Mapping[str, str] | None = None
    deadline: datetime | None = None  # finish-by time
    submitted_by: str | None = None  # the actor of task.submitted (a reviewer may not approve their own task)
    # task.readiness_changed (readiness) and task.matched / task.unmatchable (matcher); None = not known yet
    data_ready: bool | None = None
    readiness_seq: int | None = None
    matched: bool | None = None
    options: tuple[CardOption, ...] = ()  # adequate card types in matcher order, the chosen one first
    match_seq: int | None = None
    # task.cancel_requested (intake)
    cancel_requested: bool = False
    cancel_reason: str = ""
    # task.reviewed (intake) -> task.approved: the reviewer who approved it
    approved_by: str | None = None
    reclaims: int = 0  # leases taken back because its GPUs sat idle (`idle.held_after_reclaim`)
    flags: frozenset[str] = frozenset()  # alerts raised about it, and why it may start (`watch`, `queue_order`)
    # the dispatcher's own state
    state: TaskState = TaskState.QUEUED
    run: int = 0  # grants so far; a lease of an older run no longer steers the task
    resume_from: str | None = None  # last accepted checkpoint
    queued_announced: bool = False  # the last announcement is `task.queued`
    deferral_reason: DeferralReason | None = None
    deferral_detail: str | None = None
    updated_at: datetime | None = None  # when the dispatcher last changed its state

    @property
    def complete(self) -> bool:
        """Submission, readiness and match are all known: the task can be queued."""
        return self.submitted and self.data_ready is not None and self.matched is not None

    @property
    def in_queue(self) -> bool:
        """Waiting for GPUs: complete, queued or held (not for a person), and not being cancelled."""
        return (self.complete and self.state in WAITING_STATES and not self.cancel_requested
                and not (self.state is TaskState.HELD and self.deferral_reason in PERSON_HOLDS))

    @property
    def operator_held(self) -> bool:
        """An operator holds it (`shared.leasing.operator`)."""
        return self.state is TaskState.HELD and self.deferral_reason is DeferralReason.OPERATOR

    @property
    def held_for_a_person(self) -> bool:
        """Held for a reason only a person lifts (`PERSON_HOLDS`): an operator's release puts it back."""
        return self.state is TaskState.HELD and self.deferral_reason in PERSON_HOLDS

    def queued_task(self) -> QueuedTask:
        """The scheduling core's view of a task in the queue."""
        assert self.project is not None and self.priority_class is not None and self.submitted_at is not None
        return QueuedTask(
            task_id=self.task_id, project=self.project, priority_class=self.priority_class, priority=self.priority or 0,
            gpus=self.gpus or 1, submitted_at=self.submitted_at.timestamp(),
            options=self.options if self.matched else (), data_ready=bool(self.data_ready), heavy=bool(self.heavy),
            checkpoint_interval_s=self.checkpoint_interval_s,
            deadline=self.deadline.timestamp() if self.deadline is not None else None,
        )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One lease: a task's GPUs on one node, with a fencing token and a TTL."""

    lease_id: str
    task_id: str
    run: int  # the task's run this lease belongs to
    parts: int  # leases of this grant (one per node it spans)
    node_id: str
    agent_id: str
    card_type: str
    gpu_indices: tuple[int, ...]
    fencing_token: int
    granted_at: datetime
    ttl_s: float
    expires_at: datetime
    estimated_end: datetime
    resume_from: str | None = None
    policy_version: int | None = None  # the `policy` document version the grant was planned with
    borrowed_headroom: bool = False  # the grant took headroom GPUs as a standard filler (`Grant.borrowed_headroom`)
    state: LeaseState = LeaseState.ACTIVE
    started: bool = False  # an accepted report said the run is going
    progress: float | None = None
    output_units: float | None = None
    last_checkpoint: str | None = None
    last_checkpoint_at: datetime | None = None
    checkpoint_due_at: datetime | None = None  # rate cap: when the next checkpoint is due (screening; not stored)
    progress_due_at: datetime | None = None  # rate cap: when the next progress report is due (not stored)
    last_renewed_at: datetime | None = None  # when the dispatcher last renewed it (its own clock, as it applied a report)
    # when the latest report it renewed on reached `cf:reports` (Redis's clock): the lease was held then,
    # however late the report was applied (`work.run_end`); None before the first such report
    last_heard_at: datetime | None = None
    renewals_unreported: int = 0  # heartbeats not yet coalesced into `lease.renewed`
    renewal_reported_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: ReleaseReason | None = None
    preempting: bool = False  # a `PreemptCommand` was sent
    preempted_for: str | None = None  # the task the GPUs go to
    revoke_reason: RevokeReason | None = None  # a `RevokeCommand` was sent
    # utilisation (`idle.observe`): since the last `lease.renewed`, and the current idle run
    util_pct_sum: float = 0.0
    util_readings: int = 0
    idle_gpu_seconds: float = 0.0
    idle_since: datetime | None = None

    @property
    def active(self) -> bool:
        return self.state is LeaseState.ACTIVE

    @property
    def last_heard(self) -> datetime:
        """When the lease was last known held: its latest renewing report's arrival on `cf:reports`; for a
        lease stored before arrivals were kept, its last renewal; before any, its grant."""
        return self.last_heard_at or self.last_renewed_at or self.granted_at


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A GPU host, as its agent registered it."""

    node_id: str
    agent_id: str
    card_type: str
    gpus: int
    mode: NodeMode
    registered_at: datetime
    last_seen: datetime
    alive: bool = True
    time_scale: float = 1.0  # the agent's clock speed (a simulated agent's --time-scale); real agents 1
    drained: bool = False  # an operator drained it: no new leases, running ones finish
    drain_reason: str = ""
    lease_expired_at: datetime | None = None  # the last time a lease on it expired (not stored)

    @property
    def takes_leases(self) -> bool:
        """Alive and not drained: `plan()` may place work here."""
        return self.alive and not self.drained


@dataclass(frozen=True, slots=True)
class QuotaRecord:
    """A quota account (`quota.granted`, changed by `quota.adjusted`) and the GPU-seconds it counted.

    `used_gpu_seconds` starts from the ledger's count in the grant or adjustment event (usage its
    window held before), and grows by every later `usage.recorded` the account counts
    (`quota_balance.counted_gpu_seconds`, the ledger's own rule).
    """

    account_id: str
    project: str
    gpu_hours: float
    card_type: str | None
    valid_from: datetime
    valid_to: datetime
    used_gpu_seconds: float = 0.0
    alert_lead_days: float = 15.0

    def terms(self) -> QuotaTerms:
        return QuotaTerms(self.account_id, self.project, self.card_type, self.gpu_hours,
                          self.valid_from.timestamp(), self.valid_to.timestamp())


@dataclass(frozen=True)
class LeaseBook:
    """What a fold reads: tasks, leases, nodes, and quota accounts by id (with the GPU-seconds each counted).

    A handler's book holds at least what its batch needs (every task and lease it names, every
    active lease on the nodes it names); a lease missing from it was never granted.
    """

    leases: Mapping[str, LeaseRecord] = field(default_factory=dict)
    tasks: Mapping[str, TaskRecord] = field(default_factory=dict)
    nodes: Mapping[str, NodeRecord] = field(default_factory=dict)
    accounts: Mapping[str, QuotaRecord] = field(default_factory=dict)
    active_by_task: Mapping[str, AbstractSet[str]] | None = None  # optional index: task -> its active leases
    active_by_node: Mapping[str, AbstractSet[str]] | None = None  # optional index: node -> its active leases

    def active_lease_ids(self) -> Iterator[str]:
        return (lease_id for lease_id, lease in self.leases.items() if lease.active)

    def active_lease_ids_of_task(self, task_id: str) -> AbstractSet[str]:
        if self.active_by_task is not None:
            return self.active_by_task.get(task_id, frozenset())
        return {i for i, lease in self.leases.items() if lease.active and lease.task_id == task_id}

    def active_lease_ids_on_node(self, node_id: str) -> AbstractSet[str]:
        if self.active_by_node is not None:
            return self.active_by_node.get(node_id, frozenset())
        return {i for i, lease in self.leases.items() if lease.active and lease.node_id == node_id}
