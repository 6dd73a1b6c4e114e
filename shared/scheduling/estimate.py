"""Estimated starts: when would each waiting task start if nothing unexpected happened? (pure)

    starts = estimate_starts(snapshot, ordered, decided, now)   # {task_id: StartEstimate}

`ordered` is the queue in `plan()`'s order (`ordering.order_queue`), `decided` the cycle's plan.

A forecast for people (the queue view, pre-flight, deadlines), not a decision: `plan()` alone
decides. It replays the queue in `plan()`'s order over a per-node availability profile:

1. the profile starts from the snapshot: a node's GPUs free now, and those of each running lease
   free again at its estimated end (a lease past its estimate: free now);
2. this cycle's grants start now and hold their GPUs until their estimated end;
3. the cycle's reservation holder starts at the plan's `Reservation.start_at`, on its card type;
4. every other task that waits for GPUs (deferred for capacity, not for its data, match, approval,
   quota or a person) gets, in queue order, the earliest time at which one node of one of its card
   types has its GPUs free for its whole estimated runtime (conservative backfill: nothing placed
   earlier is delayed), and books them; a task wider than any node of a type books GPUs of the type
   as a whole. Tasks not estimated (ineligible, or beyond `limit`) have `start_at = None`.

Preemption, headroom and opportunistic yielding are ignored, so a core task may start earlier than
estimated; a task that runs longer than its estimate delays the ones behind it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shared.scheduling.model import Plan, QueuedTask, Reservation, Snapshot, WaitKind

DEFAULT_LIMIT = 500


@dataclass(frozen=True, slots=True)
class StartEstimate:
    task_id: str
    position: int  # 1-based, in the order `plan()` considers the queue
    start_at: float | None  # None: not estimated (see `why_not`)
    end_at: float | None
    card_type: str | None
    why_not: str = ""  # why there is no estimate: the reason the task waits for something else


class _Profile:
    """Free GPUs of one node over time: `free[i]` from `times[i]` until `times[i + 1]` (the last: for ever)."""

    __slots__ = ("times", "free")

    def __init__(self, now: float, free_now: int, releases: Sequence[tuple[float, int]]) -> None:
        self.times, self.free = [now], [free_now]
        for at, gpus in sorted(releases):
            self.book(max(at, now), math.inf, -gpus)

    def book(self, start: float, end: float, gpus: int) -> None:
        """Take `gpus` from `start` to `end` (negative: give them back)."""
        for point in (start, end):
            if point != math.inf and point not in self.times:
                index = bisect.bisect(self.times, point)
                self.times.insert(index, point)
                self.free.insert(index, self.free[index - 1])
        for index, at in enumerate(self.times):
            if start <= at < end:
                self.free[index] -= gpus

    def earliest(self, gpus: int, duration: float, not_before: float) -> float | None:
        """The first time from `not_before` at which `gpus` stay free for `duration` (None: never)."""
        candidates = [not_before, *(t for t in self.times if t > not_before)]
        for start in candidates:
            end = start + duration
            if all(free >= gpus for index, free in enumerate(self.free)
                   if self.times[index] < end and self._until(index) > start):
                return start
        return None

    def _until(self, index: int) -> float:
        return self.times[index + 1] if index + 1 < len(self.times) else math.inf


def estimate_starts(snapshot: Snapshot, ordered: Sequence[QueuedTask], decided: Plan, now: float,
                    limit: int = DEFAULT_LIMIT) -> dict[str, StartEstimate]:
    """Every queued task's estimated start (the module docstring's replay)."""
    nodes = {node.node_id: _Profile(now, len(node.free), [(lease.estimated_end, lease.gpus) for lease in snapshot.leases
                                                           if lease.node_id == node.node_id])
             for node in snapshot.nodes}
    node_cards = {node.node_id: node.card_type for node in snapshot.nodes}
    largest = {}
    for node in snapshot.nodes:
        largest[node.card_type] = max(largest.get(node.card_type, 0), node.gpus)
    estimates: dict[str, StartEstimate] = {}
    granted = {grant.task_id: grant for grant in decided.grants}
    reserved = {r.task_id: r for r in decided.reservations}
    deferrals = decided.deferrals
    # task id -> the sentence, for a task that waits for something else than GPUs (not estimated)
    not_for_capacity = {task_id: detail for task_id, reason, detail
                        in zip(deferrals.task_ids, deferrals.reasons, deferrals.details)
                        if reason.kind is not WaitKind.CAPACITY}
    for grant in decided.grants:
        for placement in grant.placements:
            if placement.node_id in nodes:
                nodes[placement.node_id].book(now, grant.estimated_end, len(placement.gpu_indices))
    for position, task in enumerate(ordered, start=1):
        if task.task_id in granted:
            grant = granted[task.task_id]
            estimates[task.task_id] = StartEstimate(task.task_id, position, now, grant.estimated_end, grant.card_type)
            continue
        why_not = not_for_capacity.get(task.task_id)
        if why_not is not None:
            estimates[task.task_id] = StartEstimate(task.task_id, position, None, None, None, why_not)
            continue
        if position > limit:
            estimates[task.task_id] = StartEstimate(task.task_id, position, None, None, None,
                                                    f"beyond the first {limit} tasks of the queue")
            continue
        estimates[task.task_id] = _place(task, position, nodes, node_cards, largest, reserved.get(task.task_id), now)
    return estimates


def _place(task: QueuedTask, position: int, nodes: dict[str, _Profile], node_cards: dict[str, str],
           largest: dict[str, int], reservation: Reservation | None, now: float) -> StartEstimate:
    """The earliest (start, node) over the task's card options; book it."""
    best: tuple[float, int, str, str] | None = None  # (start, option rank, node, card)
    for rank, option in enumerate(task.options):
        if reservation is not None and option.card_type != reservation.card_type:
            continue
        not_before = reservation.start_at if reservation is not None else now
        if task.gpus > largest.get(option.card_type, 0):
            continue  # spanning tasks: estimated only when the plan reserved for them
        for node_id, profile in nodes.items():
            if node_cards[node_id] != option.card_type:
                continue
            start = profile.earliest(task.gpus, option.runtime_s, not_before)
            if start is not None and (best is None or (start, rank, node_id) < best[:3]):
                best = (start, rank, node_id, option.card_type)
    if best is None:
        if reservation is not None:
            runtime = next(o.runtime_s for o in task.options if o.card_type == reservation.card_type)
            return StartEstimate(task.task_id, position, reservation.start_at, reservation.start_at + runtime,
                                 reservation.card_type)
        return StartEstimate(task.task_id, position, None, None, None, "no node of its card types can ever hold it")
    start, rank, node_id, card = best
    runtime = task.options[rank].runtime_s
    nodes[node_id].book(start, start + runtime, task.gpus)
    return StartEstimate(task.task_id, position, start, start + runtime, card)
