"""Deferring the rest of the queue once the cycle is closed.

`ClosedWalk` is a part of `Cycle` (a mixin over the cycle's working state). Once strict order is blocked, or
no GPU is free anywhere and the reservation is settled (`Cycle.closed`), nothing more can start: every
remaining task gets its readiness failure or the closing reason and sentence, cheaply — over a kept queue
copied from its columns in runs (`_defer_rest_from`) — except a ready core task, which may still preempt while
preemption may help one (`_defer_closed_core`).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.scheduling import reasons
from shared.scheduling.eligibility import readiness_failure, readiness_failures
from shared.scheduling.model import (
    Deferral,
    DeferralReason,
    PriorityClass,
    QueuedTask,
    enum_members,
)
from shared.scheduling.queue_columns import CORE, FLAG_VALUES, WalkColumns

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
P = enum_members(PriorityClass)



class ClosedWalk:
    """The closing deferrals of `Cycle` (`defer_rest`)."""

    __slots__ = ()  # `Cycle` declares the slots of its working state

    def defer_rest(self, tasks: Sequence[QueuedTask]) -> None:
        """Once closed: defer every remaining task cheaply (core tasks may still preempt)."""
        add_id, add_reason, add_detail = (self.deferred_ids.append, self.deferred_reasons.append,
                                          self.deferred_details.append)
        may_preempt = self.blocked is None and self.policy.preemption
        core, gate, policy = P.CORE, self.policy.readiness_gate, self.policy
        blocked = self.blocked or Deferral("", R.NO_CAPACITY, reasons.NO_FREE_GPUS_TEXT)
        reason, detail = blocked.reason, blocked.detail
        for task in tasks:
            # The readiness checks of `readiness_failure`, inlined: this loop may see 100,000 tasks.
            if (gate and not task.data_ready) or not task.options or not task.approved:
                failure = readiness_failure(task, policy)
                add_id(task.task_id)
                add_reason(failure[0])
                add_detail(failure[1])
                continue
            if may_preempt and task.priority_class == core:
                may_preempt = self._defer_closed_core(task, reason, detail)
                continue
            add_id(task.task_id)
            add_reason(reason)
            add_detail(detail)

    def _defer_closed_core(self, task: QueuedTask, reason: DeferralReason, detail: str) -> bool:
        """`defer_rest` for a ready core task while preemption may still help one: it preempts if it may
        and that helps (`consider`), else gets the closing reason and sentence. Returns whether preemption
        may still help a later one (False once no victim is left)."""
        may_preempt = True
        if self._may_preempt(task):
            may_preempt = self._victim_index().has_victims()
            if may_preempt and self._preemption_may_help(task):
                self.consider(task)
                return may_preempt
        self.defer(task.task_id, reason, detail)
        return may_preempt

    def _defer_rest_from(self, ordered: Sequence[QueuedTask], start: int, columns: WalkColumns | None) -> None:
        """`defer_rest(ordered[start:])`; with the kept queue's columns, the same deferrals without reading
        the tasks that get only a readiness failure or the closing reason: runs of them are copied from the
        columns (`_defer_run`), and each ready core task goes through `_defer_closed_core` in its place while
        preemption may still help one."""
        if columns is None:
            self.defer_rest(ordered[start:])
            return
        closing = self.blocked or Deferral("", R.NO_CAPACITY, reasons.NO_FREE_GPUS_TEXT)
        reason, detail = closing.reason, closing.detail
        failures = readiness_failures(self.policy)
        by_flags = ([reason if failure is None else failure[0] for failure in failures],
                    [detail if failure is None else failure[1] for failure in failures])
        may_preempt, end = self.blocked is None and self.policy.preemption, len(ordered)
        ready_core = bytes([bool(flags & CORE) and failures[flags] is None for flags in FLAG_VALUES]).ljust(256, b"\0")
        marks = bytes(columns.flags[start:]).translate(ready_core) if may_preempt else b""
        position = start
        while position < end:
            core_at = marks.find(1, position - start) if may_preempt else -1
            stop = end if core_at < 0 else start + core_at
            self._defer_run(columns, position, stop, by_flags)
            if stop == end:
                return
            may_preempt = self._defer_closed_core(ordered[stop], reason, detail)
            position = stop + 1

    def _defer_run(self, columns: WalkColumns, start: int, stop: int,
                   by_flags: tuple[list[DeferralReason], list[str]]) -> None:
        """Defer the tasks at positions start..stop-1 with the reason and sentence of their flags."""
        flags = columns.flags[start:stop]
        self.deferred_ids.extend(columns.task_ids[start:stop])
        self.deferred_reasons.extend(map(by_flags[0].__getitem__, flags))
        self.deferred_details.extend(map(by_flags[1].__getitem__, flags))
