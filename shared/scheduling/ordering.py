"""Queue order: which queued task is considered first.

- "cardflow": priority class (core > standard > opportunistic), then deadline (within a class, a task
  with a deadline goes before one without, an earlier deadline first — never above a higher class),
  then effective priority (the task's priority plus `policy.aging_per_hour` points per hour waited,
  so nothing starves within its class), then submit time, then task id.
- "priority": class, then priority, then submit time, then id (no aging).
- "fifo": submit time, then id.

Speed matters (100,000 tasks per cycle): each task gets ONE float key, computed in one pass and sorted
by C code; only runs of exactly equal keys are re-sorted with the tie-breaking tuple (submit time, id).
The class is folded into the float by an offset far larger than any effective priority, so effective
priorities are compared at a resolution of about 1e-6 points (closer ones count as equal and fall
through to submit time). If priorities are too large for that (|effective priority| >= 2**29), an
exact tuple sort is used instead. A queue kept sorted between cycles (`ordered_queue.OrderedQueue`)
skips the sort: in its order the float keys are already sorted, so only the runs of equal keys are
re-sorted — the same order as a fresh sort, to the last tie. Its walk columns are the kept ones as they are,
or, where a run of equal keys changed order, a copy with only that run's entries rewritten (one tie among 100,000
tasks costs a swap, not a rebuild of every column). Deadlines (cardflow order only) are applied afterwards: within each
class's run of the sorted queue, the tasks with a deadline move to its front, by deadline (ties keep
their order) — one more sort of only those tasks (and the walk columns rebuilt in that order). `order_key` states the same order for one task.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice, repeat
from operator import add, attrgetter, le, sub

from shared.scheduling.model import PriorityClass, QueuedTask
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordered_queue import OrderedQueue, equal_pairs, settle_ties, sort_equal_runs
from shared.scheduling.queue_columns import WalkColumns
from shared.scheduling.quota import SECONDS_PER_HOUR

ORDERS = ("cardflow", "priority", "fifo")

_CLASS_OFFSET = float(2**30)
_SAFE_MAGNITUDE = float(2**29)
_RANK = {cls: cls.rank * _CLASS_OFFSET for cls in PriorityClass}
_SUBMITTED = attrgetter("submitted_at")
_PRIORITY = attrgetter("priority")
_DEADLINE = attrgetter("deadline")


def effective_priority(task: QueuedTask, policy: Policy, now: float) -> float:
    """The task's priority plus its aging bonus (points per hour waited). Higher runs first."""
    if policy.order != "cardflow":
        return float(task.priority)
    waited_h = max(0.0, now - task.submitted_at) / SECONDS_PER_HOUR
    return task.priority + policy.aging_per_hour * waited_h


def order_key(task: QueuedTask, policy: Policy, now: float) -> tuple:
    """The sort key of one task; `order_queue` sorts exactly as if by this key."""
    if policy.order == "fifo":
        return (task.submitted_at, task.task_id)
    rate, shift = _aging(policy, now)
    deadline = _deadline_key(task, policy)
    return (PriorityClass(task.priority_class).rank, deadline,
            _RANK[task.priority_class] + (rate * task.submitted_at - task.priority - shift), task.submitted_at, task.task_id)


def _deadline_key(task: QueuedTask, policy: Policy) -> float:
    """A task's deadline as a sort key (no deadline, or not the cardflow order: last, all equal)."""
    return task.deadline if policy.order == "cardflow" and task.deadline is not None else math.inf


def _exact_key(task: QueuedTask, policy: Policy, now: float) -> tuple:
    priority = effective_priority(task, policy, now)
    return (PriorityClass(task.priority_class).rank, _deadline_key(task, policy), -priority, task.submitted_at,
            task.task_id)


def _aging(policy: Policy, now: float) -> tuple[float, float]:
    """Aging rate in points per second and the constant that keeps keys small."""
    rate = policy.aging_per_hour / SECONDS_PER_HOUR if policy.order == "cardflow" else 0.0
    return rate, rate * now


def order_queue(queue: Sequence[QueuedTask], policy: Policy, now: float) -> list[QueuedTask]:
    """The queue in the order the policy considers it. Independent of the input order."""
    return walk_order(queue, policy, now)[0]


def walk_order(queue: Sequence[QueuedTask], policy: Policy, now: float) -> tuple[list[QueuedTask], WalkColumns | None]:
    """`order_queue`, and for a kept queue (`OrderedQueue`) its walk columns in that order (else None)."""
    if policy.order not in ORDERS:
        raise ValueError(f"unknown queue order {policy.order!r}; expected one of {ORDERS}")
    if isinstance(queue, OrderedQueue) and queue.orders_like(policy):
        kept = _kept_order(queue, policy, now)
        if kept is not None:
            return kept
    tasks = list(queue)
    keys = _fast_keys(tasks, policy, now)
    if keys is None:
        return sorted(tasks, key=lambda task: _exact_key(task, policy, now)), None
    # The tasks sorted by their precomputed keys (handed out in order by a C-level key function), and
    # the keys sorted alike: the same comparisons, so the same permutation.
    ordered = sorted(tasks, key=partial(next, iter(keys)))
    sorted_keys = sorted(keys)
    sort_equal_runs(ordered, sorted_keys, _tie_key(policy))
    if policy.order == "cardflow" and list(map(_DEADLINE, tasks)).count(None) != len(tasks):
        _deadlines_first(ordered)
    return ordered, None


def _kept_order(queue: OrderedQueue, policy: Policy, now: float) -> tuple[list[QueuedTask], WalkColumns] | None:
    """The order of a kept queue at `now`, exactly as a fresh sort would give it (module docstring), and
    its walk columns in that order; None when the float key cannot represent the order (the exact sort
    decides then)."""
    tasks = list(queue.tasks)
    if policy.order == "fifo" or not tasks:
        return tasks, queue.walk_columns(None, policy.preempt_after_s)  # kept by (submitted, task id): the fifo order
    rate, shift = _aging(policy, now)
    priorities = (min(queue.priorities), max(queue.priorities))
    largest = (max(abs(rate * (at - now)) for at in queue.submitted_bounds)
               + max(abs(value) for value in priorities))  # as in _fast_keys
    if largest >= _SAFE_MAGNITUDE:
        return None
    equal_to_next = _equal_pairs_where_near(queue, shift)
    if equal_to_next is None:
        # The cycle's key of each task from its kept columns: offset + (aged - rate * now), as in _fast_keys.
        keys = list(map(add, queue.offsets, map(sub, queue.aged, repeat(shift))))
        if not all(map(le, keys, islice(keys, 1, None))):  # rounding is monotone, so this does not happen
            return None
        equal_to_next = equal_pairs(keys)
    moves = settle_ties(tasks, equal_to_next, _tie_key(policy))
    if policy.order == "cardflow" and queue.with_deadline:
        _deadlines_first(tasks)
        kept_at = {id(task): index for index, task in enumerate(queue.tasks)}
        return tasks, queue.walk_columns([kept_at[id(task)] for task in tasks], policy.preempt_after_s)
    if moves:  # a few runs of equal keys whose tie order differs from the kept order
        return tasks, queue.walk_columns_moved(moves, policy.preempt_after_s)
    return tasks, queue.walk_columns(None, policy.preempt_after_s)


def _equal_pairs_where_near(queue: OrderedQueue, shift: float) -> list[int] | None:
    """The positions whose float key at this cycle (offset + (aged - shift), as `_kept_order` works them out) equals
    the next task's, found by comparing only the pairs `queue.near_next` marks and those where the class changes:
    every other pair's keys rise strictly (`ordered_queue.NEAR_GAP`: `_kept_order` has checked that the keys stay
    below 2**31 + 2**29). None (work every key out) when a marked pair's keys fall, and when more than one pair in 32
    is marked: a queue of many equal keys."""
    offsets, aged, last = queue.offsets, queue.aged, len(queue.aged) - 1
    marks = bytes(queue.near_next)
    if marks.count(1) * 32 > len(marks):
        return None
    pairs = [bisect_left(offsets, offset) - 1 for offset in sorted(_RANK.values())]  # the last task of a class
    at = marks.find(1)
    while at >= 0:
        pairs.append(at)
        at = marks.find(1, at + 1)
    equal = []
    for at in sorted(set(pairs)):
        if 0 <= at < last:
            key, following = offsets[at] + (aged[at] - shift), offsets[at + 1] + (aged[at + 1] - shift)
            if key == following:
                equal.append(at)
            elif not key < following:
                return None
    return equal


def _deadlines_first(ordered: list[QueuedTask]) -> None:
    """Within each class, move the tasks with a deadline to the front, earliest deadline first (in place)."""
    start = 0
    while start < len(ordered):
        klass = ordered[start].priority_class
        end = start
        while end < len(ordered) and ordered[end].priority_class == klass:
            end += 1
        block = ordered[start:end]
        with_deadline = sorted((t for t in block if t.deadline is not None), key=lambda t: t.deadline)  # stable
        if with_deadline:
            ordered[start:end] = with_deadline + [t for t in block if t.deadline is None]
        start = end


def _fast_keys(tasks: list[QueuedTask], policy: Policy, now: float) -> list[float] | None:
    """One float per task, smaller = earlier; None when the float cannot represent the order."""
    if policy.order == "fifo":
        return list(map(_SUBMITTED, tasks))
    if not tasks:
        return []
    rate, shift = _aging(policy, now)
    submitted = (min(map(_SUBMITTED, tasks)), max(map(_SUBMITTED, tasks)))
    priorities = (min(map(_PRIORITY, tasks)), max(map(_PRIORITY, tasks)))
    largest = max(abs(rate * (at - now)) for at in submitted) + max(abs(value) for value in priorities)
    if largest >= _SAFE_MAGNITUDE:
        return None
    rank = _RANK
    # -(priority + rate * (now - submitted)) == rate * submitted - priority - rate * now
    return [rank[task.priority_class] + (rate * task.submitted_at - task.priority - shift) for task in tasks]


def _tie_key(policy: Policy) -> Callable[[QueuedTask], tuple]:
    if policy.order == "fifo":
        return attrgetter("task_id")
    return attrgetter("submitted_at", "task_id")
