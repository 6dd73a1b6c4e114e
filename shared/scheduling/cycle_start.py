"""Starting one task inside one cycle: headroom, the reservation's guard, best-fit placement, the grant.

`TaskStart` is a part of `Cycle` (a mixin over the cycle's working state). Per card option in matcher order:
standard work leaves the headroom free or borrowed (`_eats_headroom`; fillers and work that returns within the
preemption grace may use it), a task that would still run at the reservation's start stays within the guard
(`_place`), and the first option that places it is granted (`_grant`: fleet, guard, quota, borrowed headroom
and the releases later reservations count on); else each option's miss says why (`_why_not`).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.scheduling.backfill import ReservationGuard, fills_reservation, new_release
from shared.scheduling.explain import Miss
from shared.scheduling.headroom import (
    blocked_by_headroom,
    headroom_needed,
    wider_than_headroom_allows,
)
from shared.scheduling.model import (
    CardOption,
    DeferralReason,
    PriorityClass,
    QueuedTask,
    enum_members,
    new_grant,
)
from shared.scheduling.opportunistic_scan import OpportunisticScan
from shared.scheduling.placement import Allocation, Pool
from shared.scheduling.preemption import grant_reclaimable_within_grace

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
P = enum_members(PriorityClass)



class TaskStart:
    """Starting a task for `Cycle` (`_try_start`)."""

    __slots__ = ()  # `Cycle` declares the slots of its working state

    def _try_start(self, task: QueuedTask, options: Sequence[CardOption]) -> list[Miss]:
        """Grant the task on its first card option that takes it; else why each option did not."""
        misses = []
        fills = self.guard_reclaims and fills_reservation(task, self.policy)  # may ignore the guard
        wide = not self.reservation_settled and self.wide(task, options)  # settled: never wide
        for option in options:
            pool = self.fleet.pools.get(option.card_type)
            if pool is None:
                misses.append(Miss(R.NO_CAPACITY, option, None))
                continue
            filler = False  # standard work that checkpoints, granted on headroom GPUs (`_fills_headroom`)
            if self._eats_headroom(task, pool, wide) and not self._may_use_headroom(option):
                if not self._fills_headroom(task, pool):
                    misses.append(Miss(R.HEADROOM, option, pool))
                    continue
                filler = True
            guard = self.guard
            if guard is not None and (fills or not guard.applies(option.card_type, self.now + option.runtime_s)):
                guard = None
            borrowing = filler or self.covers_headroom(task, option)
            allocation = self._place(task, pool, guard, borrowing)
            if allocation is not None:
                self._grant(task, option, allocation, guard, borrowing, filler)
                return []
            misses.append(Miss(self._why_not(task, pool, guard), option, pool))
        return misses

    def _eats_headroom(self, task: QueuedTask, pool: Pool, wide: bool) -> bool:
        """True if the task (standard) would leave less than it must (`headroom_needed`) free or borrowed."""
        if task.priority_class != P.STANDARD:
            return False  # `blocked_by_headroom` holds only standard work back
        needed = headroom_needed(task.gpus, pool.headroom, pool.total_gpus, wide)
        if not blocked_by_headroom(task.priority_class, task.gpus, pool.free_total, needed):
            return False  # the free GPUs alone cover it: no need to count the borrowed ones
        borrowed = self.borrowed.of(pool.card_type)
        return blocked_by_headroom(task.priority_class, task.gpus, pool.free_total, needed, borrowed)

    def _fills_headroom(self, task: QueuedTask, pool: Pool) -> bool:
        """True if the task may take headroom GPUs as a filler (`policy.checkpointing_standard_borrows`): it
        checkpoints, so core work past its grace takes the GPUs back at the cost of its checkpoint write — with
        `policy.fillers_after_opportunistic`, only where no ready opportunistic task the pool's free GPUs could hold,
        and its quota lets run there, waits (`OpportunisticScan.waits_for`): that one would borrow them instead."""
        if not (self._fillers and task.priority_class == P.STANDARD and task.checkpoint_interval_s is not None):
            return False
        if not self.policy.fillers_after_opportunistic:
            return True
        if self._opportunistic_scan is None:
            self._opportunistic_scan = OpportunisticScan(self._queue, self._gate, self.quota, self._queue_columns)
        return not self._opportunistic_scan.waits_for(pool.card_type, pool.free_total)

    def _may_use_headroom(self, option: CardOption) -> bool:
        """True if a standard task may take headroom GPUs on this option: it returns them within the grace
        (`_returns_within_grace`) and no standard holder counts on that headroom this cycle (`_headroom_kept`)."""
        return self._returns_within_grace(option) and option.card_type not in self._headroom_kept

    def _returns_within_grace(self, option: CardOption) -> bool:
        """True if a task would give the GPUs back (by its estimate) before a core task arriving now
        could preempt (`policy.preempt_after_s`; with `policy.standard_borrows_within_graces`, that many
        graces if more): then it may use headroom GPUs — a core task waits about no longer for them than
        it would wait to preempt, and they do not idle meanwhile."""
        return self.policy.preemption and option.runtime_s <= self._short_s

    def wide(self, task: QueuedTask, options: Sequence[CardOption]) -> bool:
        """True for a standard task that would hold the cycle's reservation (none is settled yet) and
        asks for more than total − headroom on every card type it accepts: it need leave only the
        rest of the type free (no task that fits the fleet is kept out for good by the headroom)."""
        if task.priority_class != P.STANDARD or self.reservation_settled:
            return False
        pools = self.fleet.pools
        return wider_than_headroom_allows(task.gpus, ((pool.total_gpus, pool.headroom) for option in options
                                                      if (pool := pools.get(option.card_type)) is not None))

    def covers_headroom(self, task: QueuedTask, option: CardOption) -> bool:
        """True if the GPUs of a grant to the task on this option would count as headroom (`Borrowed`):
        opportunistic work — with `policy.headroom_counts_reclaimable_only`, only work core work
        could have back within the preemption grace — and, with `policy.standard_borrows_within_graces`,
        standard work whose estimate ends within that many graces."""
        if task.priority_class != P.OPPORTUNISTIC:
            return task.priority_class == P.STANDARD and self._borrow_s is not None and option.runtime_s <= self._borrow_s
        return self.borrowed.counts is None or grant_reclaimable_within_grace(task, option.runtime_s, self.policy)

    def _place(self, task: QueuedTask, pool: Pool, guard: ReservationGuard | None,
               covers_headroom: bool) -> Allocation | None:
        if guard is None:
            return self.fleet.place(pool, task.gpus, task.heavy)
        key = (pool.card_type, task.heavy, task.gpus > pool.max_node_gpus)
        if task.gpus > guard.room(covers_headroom) or task.gpus >= guard.failed_at.get(key, task.gpus + 1):
            return None
        allocation = self.fleet.place(pool, task.gpus, task.heavy, guard.limit(task.heavy))
        if allocation is None:
            guard.failed_at[key] = task.gpus
        return allocation

    def _why_not(self, task: QueuedTask, pool: Pool, guard: ReservationGuard | None) -> DeferralReason:
        if guard is not None and self.fleet.place(pool, task.gpus, task.heavy) is not None:
            return R.BEHIND_RESERVATION
        if task.heavy and self.fleet.place(pool, task.gpus, False) is not None:
            return R.HEAVY_SPREAD
        return R.NO_CAPACITY

    def _grant(self, task: QueuedTask, option: CardOption, allocation: Allocation,
               guard: ReservationGuard | None, borrowing: bool, filler: bool = False) -> None:
        """Start the task: `borrowing`, its GPUs count as headroom (`covers_headroom`, or `filler`: standard
        work on headroom GPUs, whose lease keeps the flag)."""
        placements = self.fleet.take(allocation, task.heavy)
        if guard is not None:
            guard.charge(allocation, borrowing)
        self.quota.charge(task, option)
        end = self.now + option.runtime_s
        self.grants.append(new_grant(task.task_id, option.card_type, placements, end, filler))
        self._changed_on(option.card_type)
        if borrowing:
            self.borrowed.change(option.card_type, task.gpus)
        for rank, count in allocation:
            self._releases.append((option.card_type, new_release((end, rank, count, task.heavy, borrowing))))
