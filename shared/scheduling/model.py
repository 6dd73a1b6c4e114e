"""Immutable inputs and outputs of one scheduling cycle.

Times are float seconds since the Unix epoch (UTC); durations are float seconds. Floats keep the
core fast enough to run on 10,000 nodes and 100,000 queued tasks, and let the simulator use
simulated time without conversion. The dispatcher converts aware datetimes at its boundary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from types import SimpleNamespace
from typing import Mapping, overload


def enum_members(enum: type[Enum]) -> SimpleNamespace:
    """The enum's members as plain attributes (the same objects): in CPython 3.11 reading
    `Enum.MEMBER` goes through the enum's metaclass (~75 ns), a namespace attribute costs ~20 ns, and
    the scheduling core reads such members several times for each of 100,000 queued tasks."""
    return SimpleNamespace(**enum.__members__)


class PriorityClass(StrEnum):
    """Service classes, strongest first."""

    CORE = "core"  # the work the fleet exists for; may use headroom at once, may preempt
    STANDARD = "standard"  # normal work; never takes the headroom share
    OPPORTUNISTIC = "opportunistic"  # backfills anything idle; first to be preempted

    @property
    def rank(self) -> int:
        """0 for core, 1 for standard, 2 for opportunistic (lower runs first)."""
        return _CLASS_RANK[self]


_CLASS_RANK = {PriorityClass.CORE: 0, PriorityClass.STANDARD: 1, PriorityClass.OPPORTUNISTIC: 2}


class Profile(StrEnum):
    """What bounds a task's speed, used to scale its estimate from the reference card."""

    COMPUTE = "compute"
    MEMORY = "memory"
    BALANCED = "balanced"


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU host as the dispatcher sees it: its card type and which GPU indices are free."""

    node_id: str
    card_type: str
    gpus: int
    free: frozenset[int]
    heavy_running: int = 0  # memory/bandwidth-heavy tasks currently leased on this node


@dataclass(frozen=True, slots=True)
class RunningLease:
    """A lease in force: which task holds which GPUs, and when it is expected to end."""

    lease_id: str
    task_id: str
    project: str
    priority_class: PriorityClass
    node_id: str
    card_type: str
    gpu_indices: tuple[int, ...]
    started_at: float
    estimated_end: float
    last_checkpoint_at: float | None = None  # None = no checkpoint yet (progress since start is at risk)
    heavy: bool = False
    checkpoints_on_preempt: bool = False  # the task checkpoints: preempting it loses only the write
    # Standard work granted on headroom GPUs (`Policy.checkpointing_standard_borrows`): it covers the headroom
    # and yields to core work like opportunistic work. Left out of repr: plans that never set it print as before.
    borrowed_headroom: bool = field(default=False, repr=False)
    # When its task was submitted (`QueuedTask.submitted_at`): the fifo order ranks a preempted task by it, so under
    # fifo only work submitted after the preempting task is a victim. None: unknown (ranked after every task).
    submitted_at: float | None = field(default=None, repr=False)
    # Its task's priority (`QueuedTask.priority`): where the task would rank in the queue if it were requeued
    # (`Policy.standard_yields_restart_after_queue`).
    priority: int = field(default=0, repr=False)

    @property
    def gpus(self) -> int:
        return len(self.gpu_indices)


@dataclass(frozen=True, slots=True)
class QuotaAccount:
    """A quota account of a project (optionally of one card type): GPU-hours left and its validity window.

    How accounts apply, count and cover is `quota_balance` (shared with the dispatcher and the ledger).
    """

    project: str
    remaining_gpu_hours: float  # after recorded usage and what running leases are still expected to use
    valid_from: float
    valid_to: float
    card_type: str | None = None  # None: every card type
    account_id: str = ""  # "" : the key it has in `Snapshot.quotas`


@dataclass(frozen=True, slots=True)
class CardOption:
    """One adequate card type for a task, in matcher order (cheapest adequate first)."""

    card_type: str
    runtime_s: float  # estimated runtime on this card type
    cost: float  # estimated cost = runtime x gpus x price


@dataclass(frozen=True, slots=True)
class QueuedTask:
    """A task waiting for GPUs, with everything the core needs to decide about it."""

    task_id: str
    project: str
    priority_class: PriorityClass
    priority: int
    gpus: int
    submitted_at: float
    options: tuple[CardOption, ...]  # empty = not (yet) matched
    data_ready: bool = True
    approved: bool = True
    heavy: bool = False
    checkpoint_interval_s: float | None = None
    deadline: float | None = None  # finish-by time: in the cardflow order, earlier deadlines go first within a class


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the fleet looks like at the start of a cycle."""

    nodes: tuple[Node, ...]
    leases: tuple[RunningLease, ...] = ()
    # Quota accounts by id (a project's name serves as the id of its only account). Work no account
    # applies to (its project, its card type) is unlimited.
    quotas: Mapping[str, QuotaAccount] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Placement:
    node_id: str
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Grant:
    task_id: str
    card_type: str
    placements: tuple[Placement, ...]
    estimated_end: float
    # Standard work granted on headroom GPUs as a filler (`Policy.checkpointing_standard_borrows`); its lease
    # carries it (`RunningLease.borrowed_headroom`). Left out of repr: plans that never set it print as before.
    borrowed_headroom: bool = field(default=False, repr=False)


def new_placement(node_id: str, gpu_indices: tuple[int, ...]) -> Placement:
    """`Placement(node_id, gpu_indices)`, the same value, without the frozen dataclass's `__init__` (a call of
    `object.__setattr__` per field): each slot is set through its descriptor. `plan()` makes one per grant."""
    placement = _new(Placement)
    _PLACEMENT_NODE_ID(placement, node_id)
    _PLACEMENT_GPU_INDICES(placement, gpu_indices)
    return placement


def new_grant(task_id: str, card_type: str, placements: tuple[Placement, ...], estimated_end: float,
              borrowed_headroom: bool) -> Grant:
    """`Grant(...)` of these fields, the same value, made as `new_placement` makes a placement."""
    grant = _new(Grant)
    _GRANT_TASK_ID(grant, task_id)
    _GRANT_CARD_TYPE(grant, card_type)
    _GRANT_PLACEMENTS(grant, placements)
    _GRANT_ESTIMATED_END(grant, estimated_end)
    _GRANT_BORROWED_HEADROOM(grant, borrowed_headroom)
    return grant


_new = object.__new__
_PLACEMENT_NODE_ID, _PLACEMENT_GPU_INDICES = Placement.node_id.__set__, Placement.gpu_indices.__set__  # type: ignore[attr-defined]
_GRANT_TASK_ID, _GRANT_CARD_TYPE, _GRANT_PLACEMENTS, _GRANT_ESTIMATED_END, _GRANT_BORROWED_HEADROOM = (
    getattr(Grant, name).__set__ for name in ("task_id", "card_type", "placements", "estimated_end", "borrowed_headroom"))


@dataclass(frozen=True, slots=True)
class Preemption:
    lease_id: str
    task_id: str
    for_task_id: str
    lost_gpu_hours: float  # progress since the victim's last checkpoint


@dataclass(frozen=True, slots=True)
class Reservation:
    task_id: str
    card_type: str
    start_at: float
    node_ids: tuple[str, ...]


class WaitKind(StrEnum):
    """What a `DeferralReason` says about the waiting task (the dispatcher and the projection both use it)."""

    NOT_ELIGIBLE = "not_eligible"  # its data or its match is missing: readiness / the matcher publish that
    HOLD = "hold"  # someone or something must act (quota, approval, deadline, operator): the task is held
    CAPACITY = "capacity"  # eligible, and waits for GPUs (no capacity, headroom, a reservation, ...)


class DeferralReason(StrEnum):
    """Why a task waits: the one machine reason of `plan()`'s deferrals and of `task.held`.

    The detail sentence travels beside it. `kind` groups the reasons (`WaitKind`); the last four
    hold reasons come from outside the core (policy, deadlines, operators, idle reclaim), never from `plan()`.
    """

    DATA_NOT_READY = "data_not_ready"
    UNMATCHED = "unmatched"
    NOT_APPROVED = "not_approved"  # policy requires an operator's approval for a task this big
    QUOTA_EXHAUSTED = "quota_exhausted"  # the project's quota does not cover the estimate
    QUOTA_EXPIRES = "quota_expires"  # the quota expires before the task's estimated end (+ margin)
    QUOTA_NOT_YET_VALID = "quota_not_yet_valid"  # the quota's validity window has not started
    NO_CAPACITY = "no_capacity"
    HEADROOM = "headroom"
    RESERVED = "reserved"  # this task holds the reservation and waits for it
    BEHIND_RESERVATION = "behind_reservation"  # would delay the reserved task
    HEAD_OF_LINE = "head_of_line"  # baselines: blocked behind an earlier task
    AWAITING_PREEMPTION = "awaiting_preemption"  # victims are being preempted for it
    HEAVY_SPREAD = "heavy_spread"  # every fitting node already holds max heavy tasks
    NO_QUOTA_ACCOUNT = "no_quota_account"  # policy requires an account and the project has none
    DEADLINE_UNREACHABLE = "deadline_unreachable"  # cannot finish before the task's deadline
    OPERATOR = "operator"  # an operator put the task on hold
    REPEATEDLY_IDLE = "repeatedly_idle"  # its GPUs were reclaimed for idleness again and again: a person should look

    @property
    def kind(self) -> WaitKind:
        """Not eligible, held, or waiting for capacity."""
        return _WAIT_KINDS.get(self, WaitKind.CAPACITY)


_WAIT_KINDS = {
    DeferralReason.DATA_NOT_READY: WaitKind.NOT_ELIGIBLE, DeferralReason.UNMATCHED: WaitKind.NOT_ELIGIBLE,
    **dict.fromkeys((
        DeferralReason.NOT_APPROVED, DeferralReason.QUOTA_EXHAUSTED, DeferralReason.QUOTA_EXPIRES,
        DeferralReason.QUOTA_NOT_YET_VALID, DeferralReason.NO_QUOTA_ACCOUNT, DeferralReason.DEADLINE_UNREACHABLE,
        DeferralReason.OPERATOR, DeferralReason.REPEATEDLY_IDLE,
    ), WaitKind.HOLD),
}


@dataclass(frozen=True, slots=True, init=False)
class Deferral:
    task_id: str
    reason: DeferralReason
    detail: str

    def __init__(self, task_id: str, reason: DeferralReason, detail: str) -> None:
        # What the generated __init__ of a frozen dataclass does, without its object.__setattr__ lookups:
        # plan() makes one Deferral per queued task (100,000 at scale).
        _set_task_id(self, task_id)
        _set_reason(self, reason)
        _set_detail(self, detail)


_set_task_id, _set_reason, _set_detail = Deferral.task_id.__set__, Deferral.reason.__set__, Deferral.detail.__set__


@dataclass(frozen=True, slots=True)
class Deferrals(Sequence[Deferral]):
    """A plan's deferrals as three parallel columns: the i-th task waits for the i-th reason and detail.

    `plan()` defers most of a large queue (about 90,000 of 100,000 tasks at scale); columns spare it
    one object per waiting task. Hot readers (the dispatcher's effects, the simulator) read the
    columns; anyone else may treat the value as a read-only sequence of `Deferral`, made on access.
    Equal when the columns are equal; a slice is again a `Deferrals`.
    """

    task_ids: tuple[str, ...] = ()
    reasons: tuple[DeferralReason, ...] = ()
    details: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.task_ids) == len(self.reasons) == len(self.details):
            raise ValueError(f"Deferrals columns differ in length: {len(self.task_ids)} task ids, "
                             f"{len(self.reasons)} reasons, {len(self.details)} details")

    @classmethod
    def of(cls, deferrals: Iterable[Deferral]) -> Deferrals:
        """The columns of these deferrals (in their order)."""
        items = tuple(deferrals)
        return cls(tuple(d.task_id for d in items), tuple(d.reason for d in items), tuple(d.detail for d in items))

    def __len__(self) -> int:
        return len(self.task_ids)

    @overload
    def __getitem__(self, index: int) -> Deferral: ...

    @overload
    def __getitem__(self, index: slice) -> Deferrals: ...

    def __getitem__(self, index: int | slice) -> Deferral | Deferrals:
        if isinstance(index, slice):
            return Deferrals(self.task_ids[index], self.reasons[index], self.details[index])
        return Deferral(self.task_ids[index], self.reasons[index], self.details[index])

    def __iter__(self) -> Iterator[Deferral]:
        return map(Deferral, self.task_ids, self.reasons, self.details)

    def __repr__(self) -> str:
        return f"Deferrals({list(self)!r})"

    def extended(self, more: Iterable[Deferral]) -> Deferrals:
        """These deferrals followed by `more`."""
        added = Deferrals.of(more)
        return Deferrals(self.task_ids + added.task_ids, self.reasons + added.reasons, self.details + added.details)


@dataclass(frozen=True, slots=True)
class Plan:
    grants: tuple[Grant, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    # Columns (`Deferrals`); a plain sequence of `Deferral` given here is turned into columns.
    deferrals: Deferrals = Deferrals()
    # Plan again at this time even if nothing else happens: a waiting task's preemption grace
    # (`Policy.preempt_after_s`) ends then. None = no such deadline.
    revisit_at: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.deferrals, Deferrals):
            object.__setattr__(self, "deferrals", Deferrals.of(self.deferrals))
