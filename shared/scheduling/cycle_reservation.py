"""The cycle's one reservation (EASY backfill): when GPUs come free, the sweep, and the due holder's options.

`CycleReservation` is a part of `Cycle` (a mixin over the cycle's working state). The first task that fits
nowhere (and does not preempt) holds the cycle's reservation: the running leases and this cycle's grants and
holds give back their GPUs in time order (`_releases_for`; the scan of the leases is kept per card types,
`_lease_releases`) and `find_reservation` sweeps them. A reservation due only because fillers yield reclaims
them at once (`_reclaim_from_fillers`); one far off may preempt within a budget its wait pays for
(`Cycle._preempt_within_budget`); otherwise the guard keeps backfill from delaying the holder.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

from shared.scheduling import reasons
from shared.scheduling.backfill import (
    Release,
    ReservationGuard,
    find_reservation,
    yields_to_reservation,
)
from shared.scheduling.cycle_preemption import ranks_ahead
from shared.scheduling.headroom import headroom_needed
from shared.scheduling.model import (
    CardOption,
    Deferral,
    DeferralReason,
    PriorityClass,
    QueuedTask,
    Reservation,
    RunningLease,
    enum_members,
)
from shared.scheduling.policy_knobs import PreemptAtOnce

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
_FIRST = itemgetter(0)
P = enum_members(PriorityClass)



class CycleReservation:
    """The reservation of `Cycle` (`_reserve`)."""

    __slots__ = ()  # `Cycle` declares the slots of its working state

    def _reserve(self, task: QueuedTask, options: Sequence[CardOption], fallback: Deferral) -> None:
        cards = {option.card_type for option in options}
        yield_at = self._fillers_yield_at(task)
        wide = self.wide(task, options)
        guard = find_reservation(task, options, self.fleet, self._releases_for(cards, yield_at, task), self.now, wide)
        self.reservation_settled = True  # one sweep per cycle, successful or not
        fillers_yield_then = False  # the reservation starts when the holder's grace ends
        if guard is not None and yield_at is not None:
            if self._reclaim_from_fillers(task, options, cards, guard):
                return
        if guard is not None and self._preempt_within_budget(task, options, guard):
            return
        if guard is not None and yield_at is not None:
            fillers_yield_then = guard.start_at == yield_at > self.now
            if fillers_yield_then:
                self._revisit(yield_at)
        if guard is None:
            self._add(fallback)
            if not self.policy.backfill:
                self.blocked = Deferral("", R.HEAD_OF_LINE, reasons.head_of_line(task.task_id))
            return
        # Fillers may ignore the guard only if the holder can take their GPUs back by its start.
        self.guard, self.guard_reclaims = guard, yield_at is not None and yield_at <= guard.start_at
        node_ids = tuple(sorted(self.fleet.node_ids[rank] for rank, _ in guard.allocation))
        self.reservations.append(Reservation(task.task_id, guard.card_type, guard.start_at, node_ids))
        detail = reasons.reserved(task.gpus, guard.card_type, guard.start_at - self.now, node_ids, fillers_yield_then)
        self.defer(task.task_id, R.RESERVED, detail)
        if not self.policy.backfill:
            detail = reasons.behind_blocked_head(task.task_id, self.policy.name)
            self.blocked = Deferral("", R.BEHIND_RESERVATION, detail)

    def _fillers_yield_at(self, task: QueuedTask) -> float | None:
        """When opportunistic work filling the reservation yields its GPUs to this task, should it
        hold the reservation: once the task's preemption grace is over (with `policy.preempt_at_once`: now).
        None: never (policy off, or the task is opportunistic itself)."""
        if not self.policy.fill_reservations or task.priority_class == P.OPPORTUNISTIC:
            return None
        if self._at_once is not PreemptAtOnce.NEVER:  # fillers checkpoint: they lose only their write, now or later
            return self.now
        return max(self.now, self._grace_ends(task))

    def _reclaim_from_fillers(self, task: QueuedTask, options: Sequence[CardOption], cards: set[str],
                              guard: ReservationGuard) -> bool:
        """The reservation is due now, but only because fillers yield: preempt them (True if done) — with
        `policy.holder_reclaims_within_headroom`, not if the headroom would refuse the holder anyway; with
        `policy.reclaiming_holder_keeps_headroom`, a standard holder's card types keep their headroom for it for
        the rest of the cycle (`_may_use_headroom`)."""
        if guard.start_at > self.now:
            return False
        if self.policy.holder_reclaims_within_headroom and self._headroom_refuses(task, guard):
            return False
        plain = find_reservation(task, options, self.fleet, self._releases_for(cards, None), self.now, guard.wide)
        if plain is not None and plain.start_at <= self.now:
            return False  # due anyway: leases past their estimated end count as ending now
        if not self._preempt(task, options, reclaiming=True):
            return False
        if self.policy.reclaiming_holder_keeps_headroom and task.priority_class == P.STANDARD:
            self._headroom_kept.update(option.card_type for option in options)
        return True

    def _headroom_refuses(self, task: QueuedTask, guard: ReservationGuard) -> bool:
        """True if the headroom keeps the standard holder off the guard's card type whatever fillers yield:
        free + borrowed GPUs minus its own stay below what it must leave (`headroom_needed`) — preempting a
        borrowing filler moves its GPUs from borrowed to free and leaves that sum as it is."""
        if task.priority_class != P.STANDARD:
            return False
        pool = self.fleet.pools[guard.card_type]
        needed = headroom_needed(task.gpus, pool.headroom, pool.total_gpus, guard.wide)
        return pool.free_total + self.borrowed.of(guard.card_type) - task.gpus < needed

    def _releases_for(self, card_types: set[str], yield_at: float | None,
                      holder: QueuedTask | None = None) -> dict[str, list[Release]]:
        """Per card type, when the running leases and this cycle's grants and holds free their GPUs."""
        grouped = self._lease_releases(card_types, yield_at, holder)
        for card_type, release in self._releases:
            if card_type in card_types:
                grouped.setdefault(card_type, []).append(release)
        return grouped

    def _lease_releases(self, card_types: set[str], yield_at: float | None = None,
                        holder: QueuedTask | None = None) -> dict[str, list[Release]]:
        """Per card type, when the running leases on nodes of these card types are expected to free their GPUs
        (and whether they borrow headroom until then: opportunistic leases) — a new list per card type. Leases
        preempted this cycle are left out (`_release_victims` accounts for their GPUs). With `yield_at`, leases
        that yield to the reservation free their GPUs by then at the latest (under fifo only those ranking behind
        the `holder`: it could not preempt the others, `ranks_ahead`). One scan serves every `yield_at`
        for the same card types while no lease is preempted (`_reserve` asks with and without it); over a kept
        snapshot the scan reads only its opportunistic leases (`_scan_kept_leases`)."""
        key = (frozenset(card_types), len(self._preempted))  # the preempted set only grows
        if self._lease_scan is None or self._lease_scan[0] != key:
            scan = self._scan_leases if self._kept_index is None else self._scan_kept_leases
            self._lease_scan = (key, *scan(key[0]))
        _, releases, yielding = self._lease_scan
        grouped = {card_type: list(found) for card_type, found in releases.items()}
        if yield_at is not None:
            for card_type, index, estimated_end, lease in yielding:
                if yield_at < estimated_end and not (self._fifo and holder is not None and ranks_ahead(lease, holder)):
                    found = grouped[card_type]
                    found[index] = found[index]._replace(at=yield_at)
        return grouped

    def _scan_leases(self, card_types: frozenset[str]) -> tuple[dict[str, list[Release]], list[tuple[str, int, float, RunningLease]]]:
        """`_lease_releases` without `yield_at`, and (card type, position, estimated end, lease) of the leases among
        them that yield to the reservation (`yields_to_reservation`)."""
        rank_of, card_of = self.fleet.rank_of, self.fleet.card_of
        opportunistic, preempted = P.OPPORTUNISTIC, self._preempted
        policy, now, counts, new_release = self.policy, self.now, self.borrowed.counts, tuple.__new__
        releases: dict[str, list[Release]] = {}
        yielding = []
        for lease in self.leases:
            rank = rank_of.get(lease.node_id)
            # `not preempted` first: usually nothing is, and asking the set would read every lease id's string
            if rank is not None and (card_type := card_of[rank]) in card_types and (not preempted or lease.lease_id not in preempted):
                found = releases.get(card_type)
                if found is None:
                    found = releases[card_type] = []
                borrows = False
                if lease.priority_class == opportunistic:  # `_borrows`, inlined
                    borrows = counts is None or counts(lease)
                    if yields_to_reservation(lease, policy, now):
                        yielding.append((card_type, len(found), lease.estimated_end, lease))
                # `Release(...)` without its Python-level __new__
                found.append(new_release(Release, (lease.estimated_end, rank, len(lease.gpu_indices), lease.heavy, borrows)))
        return releases, yielding

    def _scan_kept_leases(self, card_types: frozenset[str]) -> tuple[dict[str, list[Release]], list[tuple[str, int, float, RunningLease]]]:
        """`_scan_leases` over a kept snapshot's lease index: the releases of the leases that are not opportunistic
        are kept as they are (sorted; with standard victims, `_standard_victims`, those preempted this cycle left
        out); only the opportunistic ones — whose borrowing and yielding depend on the policy and on `now` — are
        read (the same releases, in another order: the sweep sorts them)."""
        index, preempted = self._kept_index, self._preempted
        policy, now, counts, new_release = self.policy, self.now, self.borrowed.counts, tuple.__new__
        standard_preempted = preempted if preempted and self._standard_victims else None
        releases: dict[str, list[Release]] = {}
        yielding = []
        for card_type in card_types:
            kept = index.releases.get(card_type, ())
            if standard_preempted is None:
                found = list(map(_FIRST, kept))
            else:
                found = [release for release, lease_id in kept if lease_id not in standard_preempted]
            for rank, lease in index.opportunistic.get(card_type, {}).values():
                if preempted and lease.lease_id in preempted:
                    continue
                borrows = counts is None or counts(lease)
                if yields_to_reservation(lease, policy, now):
                    yielding.append((card_type, len(found), lease.estimated_end, lease))
                found.append(new_release(Release, (lease.estimated_end, rank, len(lease.gpu_indices), lease.heavy, borrows)))
            if found:
                releases[card_type] = found
        return releases, yielding
