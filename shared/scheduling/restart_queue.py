"""The queue ahead of a requeued standard task (`Policy.standard_yields_restart_after_queue`).

A standard lease that yields to core work is requeued and restarts when it is next granted GPUs. Priced as if it
restarted in the first hole of its width (yield_price.py, yield_drain.py), a one-GPU yield costs nothing when some
GPU is free now. But the requeued task keeps its place in the queue, and the ready standard tasks ranked ahead of it
take the GPUs that come free first: in session 20's trace (docs/BENCHMARKS.md) one-GPU yields priced to restart at
once restarted 5.4–5.8 h later. `QueueAhead` counts, per card type, the GPUs of the ready standard tasks that rank
ahead of a requeued lease's task (`gpus_ahead`); `HoleTimes.restart_wait` then lets the restart wait until the card
type's free GPUs exceed them too.

Ranked by the queue order's own key (`ordering.order_key`) with the lease's priority and submission time (the
requeued task keeps both; no deadline is known, so every task with one ranks ahead). Read once per cycle from the
queue plan() was given: the walk reaches standard tasks only after every core task, so none of them is granted yet
when a core task prices a yield.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import accumulate

from shared.scheduling.model import PriorityClass, QueuedTask, RunningLease
from shared.scheduling.ordering import order_key
from shared.scheduling.policy_knobs import Policy

_STANDARD = PriorityClass.STANDARD


class QueueAhead:
    """Per card type, the ready standard tasks of the queue in queue order with their GPUs summed (`gpus_ahead`)."""

    def __init__(self, ready: Iterable[QueuedTask], policy: Policy, now: float) -> None:
        """`ready`: the queue's tasks that pass the readiness checks (`Cycle._ready_queue`)."""
        self._policy, self._now = policy, now
        by_card: dict[str, list[tuple[tuple, int]]] = {}
        for task in ready:
            if task.priority_class == _STANDARD:
                key = order_key(task, policy, now)
                for option in task.options:
                    by_card.setdefault(option.card_type, []).append((key, task.gpus))
        self._keys: dict[str, list[tuple]] = {}
        self._sums: dict[str, list[int]] = {}
        for card_type, entries in by_card.items():
            entries.sort(key=lambda entry: entry[0])
            self._keys[card_type] = [key for key, _ in entries]
            self._sums[card_type] = [0, *accumulate(gpus for _, gpus in entries)]

    def gpus_ahead(self, card_type: str, lease: RunningLease) -> int:
        """GPUs of the ready standard tasks on the card type that rank ahead of the lease's task requeued (all of
        them when its submission time is unknown)."""
        keys = self._keys.get(card_type)
        if not keys:
            return 0
        if lease.submitted_at is None:
            return self._sums[card_type][-1]
        requeued = QueuedTask(task_id=lease.task_id, project=lease.project, priority_class=_STANDARD,
                              priority=lease.priority, gpus=lease.gpus, submitted_at=lease.submitted_at, options=())
        return self._sums[card_type][bisect_left(keys, order_key(requeued, self._policy, self._now))]
