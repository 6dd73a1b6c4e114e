"""EASY reservation and backfill: the blocked head gets a start time; later work must not delay it.

When the highest-priority eligible task cannot start, `find_reservation` sweeps a time-sliced
availability map of its card types (Slurm's one good idea): starting from the free GPUs left after this
cycle's grants, it releases the GPUs of running leases (and of this cycle's grants) at their estimated
ends, in time order, until the task fits — on one node, or across nodes if it must span, with room for
a heavy task and, for standard work, with the headroom kept: free GPUs plus GPUs still held by
(preemptible) opportunistic work at least the headroom once the task has its GPUs (for a task wider
than total − headroom: at least everything else; `headroom_needed` in headroom.py). That
instant is the reservation's start; the nodes it would use are the reservation's nodes.

`ReservationGuard` then polices backfill: a later task that ends before the start is free to go; one
that runs past it may only take GPUs the reservation does not need — on a reserved node at most the
GPUs that will be spare there at the start, and on the card type at most the GPUs spare at the start.
GPUs the reserved task needs only as headroom are spare for opportunistic backfill: it keeps holding
them as borrowed headroom, so the headroom stays covered. Every condition only depends on quantities
that backfill itself reduces, so the reservation's start can never move later because of backfill.

Filling the drain (`policy.fill_reservations`): while the reservation waits for GPUs to come free, the
GPUs already free for it would idle. Opportunistic work that checkpoints (`fills_reservation`) ignores
the guard and may run on them; it yields them back: for the reservation's holder, such leases
(`yields_to_reservation`) count as released once the holder's preemption grace is over, so the start
is unchanged, and when the holder fits only thanks to them, it preempts them (cycle.py). Such a lease
loses only its checkpoint write; one that would lose more than the preemption cap neither fills nor
yields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from shared.scheduling.headroom import headroom_needed
from shared.scheduling.model import CardOption, PriorityClass, QueuedTask, RunningLease
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.placement import Allocation, Fleet, Pool, span_allocation
from shared.scheduling.preemption import checkpoint_write_gpu_hours, loss_cap_gpu_hours, may_be_victim


def fills_reservation(task: QueuedTask, policy: Policy) -> bool:
    """True if the task may run on GPUs a reservation needs (it will yield them when it is due):
    opportunistic, checkpoints, and preempting it (the checkpoint write) stays within the cap."""
    return (policy.fill_reservations and task.priority_class == PriorityClass.OPPORTUNISTIC
            and task.checkpoint_interval_s is not None
            and checkpoint_write_gpu_hours(task.gpus) <= loss_cap_gpu_hours(task.gpus, policy.preempt_max_lost_gpu_hours))


def yields_to_reservation(lease: RunningLease, policy: Policy, now: float) -> bool:
    """True if the reservation holder may count on this lease's GPUs once its grace is over (it would
    preempt the lease): opportunistic, checkpoints on preemption, and loses no more than the cap."""
    return (policy.fill_reservations and lease.priority_class == PriorityClass.OPPORTUNISTIC
            and lease.checkpoints_on_preempt
            and may_be_victim(lease, now, policy.preempt_max_lost_gpu_hours))


class Release(NamedTuple):
    """GPUs of one node that become free at `at` (a running lease's or this cycle's grant's end)."""

    at: float
    rank: int
    gpus: int
    heavy: bool
    borrowed: bool = False  # held by opportunistic work until then (they count as headroom)


new_release = partial(tuple.__new__, Release)  # `Release(*fields)` from a tuple of all five, without its Python `__new__`


@dataclass(slots=True)
class ReservationGuard:
    """The reservation's start and what long-running backfill may still take without delaying it."""

    holder: str  # task id holding the reservation
    card_type: str
    start_at: float
    allocation: Allocation  # (rank, GPUs) the reserved task would get at start_at
    node_room: dict[int, int]  # reserved node rank -> GPUs long backfill may still take there
    total_room: int  # GPUs of the type long backfill may still take in total
    # GPUs of the type long backfill that is not opportunistic may still take: it would hold them
    # past the start, so they no longer cover the headroom a reserved standard task needs then.
    headroom_room: int
    heavy: bool  # the reserved task is heavy: long heavy backfill stays off its nodes
    wide: bool  # a standard holder wider than total − headroom everywhere (needs only the rest free)
    heavy_limit: dict[int, int] = field(default_factory=dict)
    # Smallest GPU count a long backfill task failed to place, per (card type, heavy, spans): room
    # only shrinks during a cycle, so any larger request fails too.
    failed_at: dict[tuple[str, bool, bool], int] = field(default_factory=dict)

    def applies(self, card_type: str, end: float) -> bool:
        """True if a task of this card type ending at `end` would still run at the start."""
        return card_type == self.card_type and end > self.start_at

    def limit(self, heavy: bool) -> Mapping[int, int]:
        """Per-node caps for a long backfill task (heavy ones may not touch a heavy reservation)."""
        if heavy and self.heavy:
            return self.heavy_limit
        return self.node_room

    def limit_version(self, heavy: bool) -> int:
        """A value that changes whenever `limit(heavy)`'s caps change: their sum, as only `charge` changes them, and
        only lowers them (the heavy limit never changes)."""
        return sum(self.limit(heavy).values())

    def free_now(self, fleet: Fleet) -> int:
        """The reserved GPUs free already (this cycle's grants taken): idle until the start unless backfilled."""
        return sum(min(count, fleet.free_count[rank]) for rank, count in self.allocation)

    def room(self, covers_headroom: bool) -> int:
        """GPUs of the type a long backfill task may still take in total. `covers_headroom`: the task
        borrows (opportunistic work whose GPUs still count as headroom: `Cycle.covers_headroom`)."""
        if covers_headroom:
            return self.total_room
        return min(self.total_room, self.headroom_room)

    def charge(self, allocation: Allocation, covers_headroom: bool) -> None:
        """A long backfill task took these GPUs: less room is left for the next one."""
        for rank, count in allocation:
            if rank in self.node_room:
                self.node_room[rank] -= count
        taken = sum(count for _, count in allocation)
        self.total_room -= taken
        if not covers_headroom:
            self.headroom_room -= taken


def find_reservation(task: QueuedTask, options: Sequence[CardOption], fleet: Fleet,
                     releases: Mapping[str, list[Release]], now: float, wide: bool = False) -> ReservationGuard | None:
    """The earliest start among the task's card options (ties: matcher order), or None if never.
    `wide`: a standard task wider than total − headroom everywhere (`headroom.headroom_needed`)."""
    best: ReservationGuard | None = None
    for option in options:
        pool = fleet.pools.get(option.card_type)
        if pool is None:
            continue
        guard = _earliest_start(task, pool, fleet, releases.get(option.card_type, []), now, wide)
        if guard is not None and (best is None or guard.start_at < best.start_at):
            best = guard
    return best


class _Availability:
    """Free GPUs of one pool's nodes at a moving time `at`, as releases are applied in order."""

    def __init__(self, fleet: Fleet, pool: Pool, heavy: bool) -> None:
        self.fleet, self.pool, self.heavy = fleet, pool, heavy
        self.free: dict[int, int] = {}
        self.loaded: dict[int, int] = {}
        self.total = pool.free_total
        self.borrowed = 0  # GPUs held by opportunistic work at `at` (set by the caller)
        self.usable_sum = 0  # GPUs usable by the task over all nodes (for spanning tasks)

    def free_at(self, rank: int) -> int:
        return self.free.get(rank, self.fleet.free_count[rank])

    def usable_at(self, rank: int) -> int:
        loaded = self.loaded.get(rank, self.fleet.heavy[rank])
        if self.heavy and loaded >= self.fleet.max_heavy:
            return 0
        return self.free_at(rank)

    def release(self, item: Release) -> None:
        before = self.usable_at(item.rank)
        self.free[item.rank] = self.free_at(item.rank) + item.gpus
        if item.heavy:
            self.loaded[item.rank] = self.loaded.get(item.rank, self.fleet.heavy[item.rank]) - 1
        self.total += item.gpus
        if item.borrowed:
            self.borrowed -= item.gpus
        self.usable_sum += self.usable_at(item.rank) - before

    def rooms(self) -> list[tuple[int, int]]:
        """(rank, usable GPUs) of every node with room, most room first, then rank."""
        rooms = [(rank, self.usable_at(rank)) for rank in self.pool.ranks]
        return sorted((item for item in rooms if item[1] > 0), key=lambda item: (-item[1], item[0]))


def _earliest_start(task: QueuedTask, pool: Pool, fleet: Fleet, releases: list[Release],
                    now: float, wide: bool) -> ReservationGuard | None:
    """Sweep releases in time order until the task fits this pool; build the guard for that time."""
    gpus = task.gpus
    spans = gpus > pool.max_node_gpus
    standard = task.priority_class == PriorityClass.STANDARD
    need_total = gpus + (headroom_needed(gpus, pool.headroom, pool.total_gpus, wide) if standard else 0)
    if need_total > pool.total_gpus:
        return None  # the headroom keeps it off this card type (it fits another one)
    state = _Availability(fleet, pool, task.heavy)
    state.borrowed = sum(item.gpus for item in releases if item.borrowed)
    if spans:
        state.usable_sum = sum(fleet.usable_free(rank, task.heavy) for rank in pool.ranks)
    fits = state.usable_sum >= gpus if spans else fleet.place(pool, gpus, task.heavy) is not None
    at = now
    events = sorted(releases)  # by time, then node rank
    index = 0
    while not (fits and state.total + state.borrowed >= need_total):
        if index == len(events):
            return None
        at = max(now, events[index].at)
        while index < len(events) and max(now, events[index].at) <= at:
            item = events[index]
            state.release(item)
            index += 1
            if not spans and state.usable_at(item.rank) >= gpus:
                fits = True
        if spans:
            fits = state.usable_sum >= gpus
    return _guard_at(task, pool, state, at, need_total, wide)


def _guard_at(task: QueuedTask, pool: Pool, state: _Availability, at: float, need_total: int,
              wide: bool) -> ReservationGuard:
    rooms = state.rooms()
    if task.gpus > pool.max_node_gpus:
        allocation = span_allocation(rooms, task.gpus)
    else:
        best = min((room, rank) for rank, room in rooms if room >= task.gpus)
        allocation = [(best[1], task.gpus)]
    assert allocation is not None  # the sweep stopped because the task fits
    node_room = {rank: state.free_at(rank) - count for rank, count in allocation}
    return ReservationGuard(
        holder=task.task_id,
        card_type=pool.card_type,
        start_at=at,
        allocation=allocation,
        node_room=node_room,
        total_room=state.total - task.gpus,
        headroom_room=state.total + state.borrowed - need_total,
        heavy=task.heavy,
        heavy_limit={rank: 0 for rank, _ in allocation},
        wide=wide,
    )
