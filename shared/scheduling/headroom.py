"""Headroom: the share of each card type that `standard` work may never take.

`policy.headroom` is a share (0..1) for every card type, or a mapping card type -> share (types not
named have none). The headroom of a type is floor(share x its total GPUs) — with
`policy.headroom_tracks_core` (cardflow) at most the GPUs core work holds or waits for on that type
right now (`core_demand`): headroom exists for core work, so where none is running or queued it costs
nothing. Core work uses the headroom at once; opportunistic work may borrow it (and is the first to be
preempted when core work arrives). So the headroom is kept as long as its GPUs are free *or borrowed*:
a standard task takes only free GPUs, and may start on a type only if the free GPUs plus the GPUs held
by opportunistic work of that type stay at or above the headroom afterwards. A task so wide that this
could never hold (more GPUs than total − headroom on every card type it accepts) must leave only
`total − its GPUs` once it would hold the cycle's reservation: it starts once every other GPU of the
type is free or borrowed, so the headroom never starves a task that fits the fleet.
`Borrowed` counts the borrowed GPUs during one cycle. With `policy.headroom_counts_reclaimable_only`
only GPUs core work could have within the preemption grace count as borrowed: opportunistic work
that ends by then, or whose preemption then would lose no more than the loss cap — not multi-day work
without checkpoints, which the cap protects for good. With `policy.standard_borrows_within_graces`
standard work borrows too while its estimate ends within that many graces (`ends_by`): it gives its
GPUs back by itself about as soon as core work could take them from opportunistic work. With
`policy.checkpointing_standard_borrows` standard work that checkpoints may take headroom GPUs as a filler:
such a lease (`RunningLease.borrowed_headroom`) borrows, and core work past its grace may preempt it
(after opportunistic work) at the cost of its checkpoint write.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from shared.scheduling.model import PriorityClass, QueuedTask, RunningLease
from shared.scheduling.policy_knobs import Policy

_STANDARD = PriorityClass.STANDARD  # read once: Enum.MEMBER is slow in CPython 3.11 (model.enum_members)


def headroom_share(policy: Policy, card_type: str) -> float:
    """The share of `card_type` kept free for core work."""
    share = policy.headroom
    if isinstance(share, (int, float)):
        return float(share)
    return float(share.get(card_type, 0.0))


def headroom_gpus(policy: Policy, card_type: str, total_gpus: int, core_gpus: int | None = None) -> int:
    """How many GPUs of the type standard work must leave free: floor(share x total), and — when the
    policy tracks core demand and `core_gpus` (what core work holds or waits for on the type) is
    given — no more than that."""
    share = headroom_share(policy, card_type)
    if share <= 0:
        return 0
    # The small epsilon keeps exact products (0.7 x 10 = 6.999999999999999) from rounding down.
    kept = min(total_gpus, math.floor(share * total_gpus + 1e-9))
    if policy.headroom_tracks_core and core_gpus is not None:
        kept = min(kept, core_gpus)
    return kept


def core_demand(leases: Iterable[RunningLease], queue: Iterable[QueuedTask],
                card_of_node: Mapping[str, str], core_first: bool = False,
                leases_since: float = -math.inf, queued_since: float = -math.inf,
                queued_gpus: Mapping[str, int] | None = None) -> dict[str, int]:
    """GPUs per card type that core work holds (running leases) or waits for (queued core tasks, on
    every card type they accept, whether or not their data is ready yet). `core_first`: the queue is
    ordered by class, so counting stops at its first task that is not core. `leases_since` /
    `queued_since`: count only leases started / tasks submitted since then (`recent_core_demand`).
    `queued_gpus`: the queued part already summed per card type over every queued core task (a kept
    queue's `core_gpus`); only with `queued_since` = -inf, and then the queue is not read."""
    demand: dict[str, int] = {}
    core = PriorityClass.CORE
    for lease in leases:
        if lease.priority_class != core or lease.started_at < leases_since:
            continue
        card_type = card_of_node.get(lease.node_id)
        if card_type is not None:
            demand[card_type] = demand.get(card_type, 0) + len(lease.gpu_indices)
    if queued_gpus is not None and queued_since == -math.inf:
        for card_type, gpus in queued_gpus.items():
            demand[card_type] = demand.get(card_type, 0) + gpus
        return demand
    for task in queue:
        if task.priority_class != core:
            if core_first:
                break
            continue
        if task.submitted_at < queued_since:
            continue
        for option in task.options:
            demand[option.card_type] = demand.get(option.card_type, 0) + task.gpus
    return demand


def recent_core_demand(leases: Iterable[RunningLease], queue: Iterable[QueuedTask],
                       card_of_node: Mapping[str, str], since: float, core_first: bool = False,
                       every_queued: bool = False, queued_gpus: Mapping[str, int] | None = None) -> dict[str, int]:
    """GPUs per card type of the core demand seen since `since` (`policy.headroom_core_demand =
    "recent"`, with `since` = now − the preemption grace): core leases that started since then and
    queued core tasks submitted since then (on every card type they accept) — with `every_queued`
    ("queued-or-recent") every queued core task, whatever its age. The headroom bridges the grace — a
    core task older than that may preempt or holds the reservation — so the demand of one grace sizes
    it: where core work arrives seldom the headroom shrinks to what recently came, and core work that
    has long been running no longer keeps GPUs idle beside it."""
    return core_demand(leases, queue, card_of_node, core_first, leases_since=since,
                       queued_since=-math.inf if every_queued else since, queued_gpus=queued_gpus)


def headroom_needed(gpus: int, headroom: int, total_gpus: int, wide: bool = False) -> int:
    """GPUs a standard task of `gpus` must leave free or borrowed on a card type: the headroom — or,
    for a `wide` task (one that would hold the cycle's reservation and asks for more than total −
    headroom on every card type it accepts, so could otherwise never start), only `total − gpus`:
    it may start once everything else is free or borrowed."""
    return min(headroom, total_gpus - gpus) if wide else headroom


def wider_than_headroom_allows(gpus: int, pools: Iterable[tuple[int, int]]) -> bool:
    """True if `gpus` exceed total − headroom on every (total GPUs, headroom) pool given (and there
    is at least one): the headroom alone would keep the task out for good."""
    found = False
    for total, headroom in pools:
        if gpus <= total - headroom:
            return False
        found = True
    return found


def blocked_by_headroom(priority_class: PriorityClass, gpus: int, free_gpus: int, headroom: int,
                        borrowed: int = 0) -> bool:
    """True if the GPUs are free but taking them would eat into the headroom (standard work only).

    The headroom (here: what `headroom_needed` says the task must leave) is intact while free +
    `borrowed` (GPUs held by preemptible opportunistic work) GPUs cover it. A task asking for more
    GPUs than are free is blocked by capacity, not headroom.
    """
    if headroom <= 0 or priority_class != _STANDARD or gpus > free_gpus:
        return False
    return free_gpus + borrowed - gpus < headroom


def standard_borrow_window(policy: Policy, now: float) -> tuple[float, float] | None:
    """(now, the latest estimated end) of the standard work that borrows the headroom this cycle
    (`policy.standard_borrows_within_graces` graces from now, preemption on); None: none does."""
    graces = policy.standard_borrows_within_graces
    if graces <= 0 or not policy.preemption:
        return None
    return now, now + graces * policy.preempt_after_s


def ends_by(lease: RunningLease, window: tuple[float, float]) -> bool:
    """True if the lease's estimate ends inside the window (after its start, by its end): a lease
    already past its estimate has no known end, so it is not counted."""
    return window[0] < lease.estimated_end <= window[1]


class Borrowed:
    """GPUs of each card type held by opportunistic work during one cycle (headroom it borrowed).

    Counted from the running opportunistic leases on first use (many cycles never need it), plus the
    opportunistic grants of this cycle, minus the GPUs of leases preempted in this cycle. `counts`
    (`policy.headroom_counts_reclaimable_only`): only the leases it accepts cover the headroom — those
    whose GPUs core work could have within the preemption grace; the caller applies the same test to
    its grants and preemptions. `standard_window` (`standard_borrow_window`): standard leases that end
    inside it borrow too (`leases` must then hold them); the caller counts its standard grants alike. So do
    standard leases granted on headroom GPUs as fillers (`RunningLease.borrowed_headroom`) with `fillers`
    (`policy.checkpointing_standard_borrows`; `leases` must then hold them), under the same `counts`.
    """

    def __init__(self, leases: Iterable[RunningLease], card_of_node: Callable[[str], str | None],
                 counts: Callable[[RunningLease], bool] | None = None,
                 standard_window: tuple[float, float] | None = None, fillers: bool = False) -> None:
        self._leases, self._card_of_node, self.counts = leases, card_of_node, counts
        self.standard_window, self.fillers = standard_window, fillers
        self._counted: dict[str, int] | None = None
        self._changes: dict[str, int] = {}

    def of(self, card_type: str) -> int:
        """GPUs of the card type opportunistic work holds now."""
        if self._counted is None:
            self._counted = self._count_leases()
        return self._counted.get(card_type, 0) + self._changes.get(card_type, 0)

    def change(self, card_type: str, gpus: int) -> None:
        """Opportunistic work took (`gpus` > 0) or gave back (`gpus` < 0) GPUs of the card type."""
        self._changes[card_type] = self._changes.get(card_type, 0) + gpus

    def _count_leases(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        opportunistic, card_of_node, counts = PriorityClass.OPPORTUNISTIC, self._card_of_node, self.counts
        window, fillers = self.standard_window, self.fillers
        for lease in self._leases:
            if lease.priority_class != opportunistic:
                if fillers and lease.borrowed_headroom and lease.priority_class == _STANDARD:
                    card_type = card_of_node(lease.node_id)
                    if card_type is not None and (counts is None or counts(lease)):
                        counted[card_type] = counted.get(card_type, 0) + lease.gpus
                elif window is not None and lease.priority_class == _STANDARD and ends_by(lease, window):
                    card_type = card_of_node(lease.node_id)
                    if card_type is not None:
                        counted[card_type] = counted.get(card_type, 0) + lease.gpus
                continue
            card_type = card_of_node(lease.node_id)
            if card_type is not None and (counts is None or counts(lease)):
                counted[card_type] = counted.get(card_type, 0) + lease.gpus
        return counted
