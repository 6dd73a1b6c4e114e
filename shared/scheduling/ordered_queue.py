"""`OrderedQueue`: the queue kept sorted between cycles, by a key that does not depend on `now`.

Ordering 100,000 tasks costs `plan()` about 60 ms a cycle, although between two cycles only a few
hundred tasks arrive, leave or change. The queue order's float key (`ordering.py`) is
`class offset + ((rate × submitted − priority) − rate × now)`: the part in the inner parentheses,
`aged = rate × submitted − priority`, does not depend on `now`, and the rest is a monotone function of
it within a class (float rounding is monotone). So a queue sorted by (class rank, aged, submitted, task
id) is already in the order of the cycle's float keys; `ordering.order_queue` only recomputes those
keys in this order and re-sorts the runs of exactly equal keys by (submitted, task id), as it does for a
fresh queue — the result is exactly the fresh order, for every `now` (tasks whose `aged` values differ
but whose keys round to the same float at this `now` are the one case where the kept order alone would
differ; the re-sort settles it). Keys can meet only where neighbours' `aged` values are near (`NEAR_GAP`):
`near_next` marks those neighbours, so `ordering` compares only their keys first.

A value: `of` sorts a queue once — by class, then by one float per task (`aged`), re-sorting only the runs of
equal floats (`sorted_kept`: the order of a sort by `kept_key`, without a tuple per task) — and builds its
columns with C-level passes (`map`) where it can; `changed` returns a new `OrderedQueue` with some tasks added and
removed (a changed task: removed as it was, added as it is) — a copy of its columns plus a binary
search per change, a few milliseconds at 100,000 tasks.
It is a `Sequence[QueuedTask]`, so `plan()` takes it wherever it takes a queue and decides exactly as
for the same tasks in a list; the dispatcher and the simulator keep one and update it from their changes.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from copy import copy
from dataclasses import replace
from functools import partial
from itertools import islice, repeat
from operator import attrgetter, eq, ge, itemgetter, lt, not_, sub
from typing import overload

from shared.scheduling.model import PriorityClass, QueuedTask
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.queue_columns import (
    WalkColumns, flags_column, flags_of, grace_bits, longest_column, longest_runtime, runtimes_of,
)
from shared.scheduling.quota import SECONDS_PER_HOUR

_CLASS_RANK = {cls: cls.rank for cls in PriorityClass}
_CLASS_OFFSETS = {cls: cls.rank * float(2**30) for cls in PriorityClass}  # = ordering._RANK
_CLASS, _PRIORITY, _SUBMITTED, _DEADLINE = (attrgetter(name) for name in ("priority_class", "priority", "submitted_at",
                                                                          "deadline"))
_PROJECT, _OPTIONS, _GPUS, _HEAVY, _TASK_ID = (attrgetter(name) for name in ("project", "options", "gpus", "heavy",
                                                                             "task_id"))
_RUNTIME, _CARD_TYPE = attrgetter("runtime_s"), attrgetter("card_type")
_TIE_KEY, _ID_KEY = attrgetter("submitted_at", "task_id"), attrgetter("task_id")  # the rest of `kept_key`


def aging_rate(policy: Policy) -> float:
    """Aging in points per second: the policy's rate for the cardflow order, 0 for the others."""
    return policy.aging_per_hour / SECONDS_PER_HOUR if policy.order == "cardflow" else 0.0


def kept_key(task: QueuedTask, order: str, rate: float) -> tuple:
    """The `now`-free sort key of a task: (class rank, aged, submitted, task id); fifo: (submitted, task id).
    `aged` is computed with the same float operations as the cycle's key (`ordering._fast_keys`)."""
    if order == "fifo":
        return (task.submitted_at, task.task_id)
    return (_CLASS_RANK[task.priority_class], rate * task.submitted_at - task.priority, task.submitted_at, task.task_id)


def sorted_kept(tasks: list[QueuedTask], order: str, rate: float) -> tuple[list[QueuedTask], list[float] | None]:
    """The tasks (unique ids) sorted by `kept_key`, and for the class orders their `aged` in that order.

    The same order as `sorted(tasks, key=kept_key)`, without a tuple per task: the tasks are split by class
    (in rank order), each class sorted by one float — `aged` (fifo: the submit time, one class) — and only the
    runs of exactly equal floats re-sorted by the rest of the key (`sort_equal_runs`)."""
    if order == "fifo":
        return _sorted_by(tasks, list(map(_SUBMITTED, tasks)), _ID_KEY)[0], None
    by_rank: dict[int, list[QueuedTask]] = {}
    for task in tasks:
        rank = _CLASS_RANK[task.priority_class]
        part = by_rank.get(rank)
        if part is None:
            part = by_rank[rank] = []
        part.append(task)
    ordered: list[QueuedTask] = []
    aged: list[float] = []
    for rank in sorted(by_rank):
        part, keys = _sorted_by(by_rank[rank], [rate * task.submitted_at - task.priority for task in by_rank[rank]],
                                _TIE_KEY)
        ordered += part
        aged += keys
    return ordered, aged


def _sorted_by(tasks: list[QueuedTask], keys: list[float], tie_key: Callable) -> tuple[list[QueuedTask], list[float]]:
    """The tasks sorted by their float keys (ties by `tie_key`), and the keys sorted alike."""
    # The tasks sorted by their precomputed keys (handed out in order by a C-level key function), and the
    # keys sorted alike: the same comparisons, so the same permutation.
    ordered = sorted(tasks, key=partial(next, iter(keys)))
    keys.sort()
    sort_equal_runs(ordered, keys, tie_key)
    return ordered, keys


def sort_equal_runs(ordered: list[QueuedTask], keys: Sequence[float], tie_key: Callable) -> bool:
    """Re-sort, in place, every run of tasks whose float keys are exactly equal (True if there was one)."""
    if not any(map(eq, keys, islice(keys, 1, None))):  # C-speed check: usually there is no tie
        return False
    for start, end in equal_runs(equal_pairs(keys)):
        ordered[start:end] = sorted(ordered[start:end], key=tie_key)
    return True


def equal_pairs(keys: Sequence[float]) -> list[int]:
    """The positions whose key equals the next one's, in order."""
    return [index for index, same in enumerate(map(eq, keys, islice(keys, 1, None))) if same]


def equal_runs(equal_to_next: Sequence[int]) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of tasks with equal keys (end exclusive), from the positions, in order, whose key
    equals the next one's (`equal_pairs`)."""
    position = 0
    while position < len(equal_to_next):
        start = end = equal_to_next[position]
        while position < len(equal_to_next) and equal_to_next[position] == end:
            end += 1
            position += 1
        yield start, end + 1


def settle_ties(ordered: list[QueuedTask], equal_to_next: Sequence[int], tie_key: Callable) -> list[tuple[int, list[int]]]:
    """`sort_equal_runs` given where the equal keys are (`equal_pairs`), telling what moved: each run whose order
    changed as (its start, the positions, before, of the tasks now at start, start + 1, ...). A run already in
    order (the usual case in a kept queue: it is kept by the same tie key) costs one C-level comparison pass."""
    moves = []
    for start, end in equal_runs(equal_to_next):
        ties = list(map(tie_key, ordered[start:end]))
        if all(map(lt, ties, islice(ties, 1, None))):
            continue
        positions = [start + offset for offset in sorted(range(end - start), key=ties.__getitem__)]  # stable
        ordered[start:end] = [ordered[at] for at in positions]
        moves.append((start, positions))
    return moves


# Two neighbours in the kept order whose `aged` values differ by at least this much have strictly increasing float
# keys in the cycle's order at any `now` that `ordering` accepts (|key| < 2**32, so each key is within 2**-21 of
# its exact value: two of them cannot meet or cross over a gap of 2**-16). `ordering` checks only the other pairs.
NEAR_GAP = 2.0 ** -16


def near_next_column(aged: Sequence[float]) -> array:
    """1 where a task's `aged` is not at least `NEAR_GAP` below its successor's (or is not a number), else 0 (and 0
    for the last task): the pairs whose float keys `ordering` must compare at `now` (`OrderedQueue.near_next`)."""
    near = array("b", map(not_, map(ge, map(sub, islice(aged, 1, None), aged), repeat(NEAR_GAP))))
    if aged:
        near.append(0)
    return near


def _core_tasks(tasks: Sequence[QueuedTask], classes: Sequence[PriorityClass]) -> list[QueuedTask]:
    return [task for task, klass in zip(tasks, classes) if klass == PriorityClass.CORE]


class OrderedQueue(Sequence[QueuedTask]):
    """Queued tasks in their `now`-free order (`kept_key`), for one queue order and aging rate.

    Besides the tasks, two float columns in the same order give the cycle's float keys without reading
    the tasks: `offsets` (the class offset of `ordering`) and `aged`; `submitted` and `longest` (each task's
    submit time and `longest_runtime`), `runtimes` (`runtimes_of` each) and `grace_bits` (for the preemption
    grace `grace_s` of the policy it was made for) let the walk decide most tasks without reading them. `submitted_bounds` and `priorities`
    (a count per priority) let `ordering` check that its float key is exact, and `near_next` (1 where a task's `aged`
    is within `NEAR_GAP` of the next task's) which neighbours' keys it must compare; `with_deadline` counts the
    tasks with a deadline. Three more columns let the walk tell, without reading a task, that it is
    deferred like an earlier one (`WalkColumns`): `flags` (`queue_columns.READY`, `MATCHED`, `APPROVED`, `CORE`,
    `OPPORTUNISTIC`, `CHECKPOINTS`), `projects` (one string object
    per project name), and `shapes` — the number of the task's (GPUs, heavy, card types),
    in a table shared by the queues made from this one (`shape_table`) — and `task_ids`; `core_gpus` sums what its core tasks ask for per card type (the
    queued part of the headroom's core demand, kept instead of counted every cycle). Never mutated (the
    shape table only grows): `changed` makes a new one.
    """

    __slots__ = ("order", "rate", "tasks", "offsets", "aged", "submitted_bounds", "priorities", "with_deadline",
                 "flags", "projects", "shapes", "task_ids", "core_gpus", "submitted", "longest", "_shape_ids",
                 "shape_table", "_project_names", "runtimes", "grace_s",
                 "grace_bits", "near_next")

    def __init__(self, order: str, rate: float, tasks: list[QueuedTask], priorities: Counter[int],
                 submitted_bounds: tuple[float, float] | None = None, grace_s: float = 0.0,
                 aged: Sequence[float] | None = None) -> None:
        """`tasks` in their kept order; `aged` their `rate * submitted - priority` if the caller has it."""
        self.order, self.rate, self.tasks, self.priorities, self.grace_s = order, rate, tasks, priorities, grace_s
        classes = list(map(_CLASS, tasks))
        self.offsets = array("d", map(_CLASS_OFFSETS.__getitem__, classes))
        self.aged = array("d", [rate * task.submitted_at - task.priority for task in tasks] if aged is None else aged)
        self.near_next = near_next_column(self.aged)
        self.submitted = array("d", map(_SUBMITTED, tasks))
        self.submitted_bounds = (submitted_bounds if submitted_bounds is not None or not tasks
                                 else (min(self.submitted), max(self.submitted)))
        self.with_deadline = len(tasks) - list(map(_DEADLINE, tasks)).count(None)
        self._shape_ids: dict[tuple, int] = {}
        self._project_names: dict[str, str] = {}  # one string object per project name (`_project`)
        self.shape_table: list[tuple[int, bool, tuple[str, ...]]] = []  # shape number -> (GPUs, heavy, card types)
        self.flags = array("b", flags_column(tasks, classes))
        projects = list(map(_PROJECT, tasks))
        self.projects = list(map(self._project_names.setdefault, projects, projects))
        options = list(map(_OPTIONS, tasks))
        card_types = [tuple(map(_CARD_TYPE, task_options)) for task_options in options]
        self.shapes = array("i", map(self._shape_number, zip(map(_GPUS, tasks), map(_HEAVY, tasks), card_types)))
        self.task_ids = list(map(_TASK_ID, tasks))
        self.runtimes = [tuple(map(_RUNTIME, task_options)) for task_options in options]
        self.longest = array("d", longest_column(self.runtimes))
        self.grace_bits = array("q", map(grace_bits, self.runtimes, repeat(grace_s)))
        self.core_gpus: dict[str, int] = {}
        for task in _core_tasks(tasks, classes):
            self._count_core(task, 1)

    @classmethod
    def of(cls, tasks: Iterable[QueuedTask], policy: Policy) -> OrderedQueue:
        """These tasks (unique ids) sorted for the policy's queue order."""
        order, rate = policy.order, aging_rate(policy)
        ordered, aged = sorted_kept(list(tasks), order, rate)
        return cls(order, rate, ordered, Counter(map(_PRIORITY, ordered)), grace_s=policy.preempt_after_s, aged=aged)

    def orders_like(self, policy: Policy) -> bool:
        """True if this queue was kept for the policy's order and aging rate."""
        return self.order == policy.order and self.rate == aging_rate(policy)

    def changed(self, added: Iterable[QueuedTask] = (), removed: Iterable[QueuedTask] = ()) -> OrderedQueue:
        """A new queue without the `removed` tasks (each must be queued, as it is here: a changed task is
        removed as it was and added as it is) and with the `added` ones. This queue is unchanged.
        Each column is copied once, merged with the changes (`_merged`): a binary search per change and one
        pass per column, however many tasks change."""
        queue = copy(self)
        queue.priorities, queue.core_gpus = Counter(self.priorities), dict(self.core_gpus)
        events: list[tuple[int, int, tuple | None]] = []  # (index here, _INSERT before it | _DROP it, new row)
        dropped: set[int] = set()
        narrowed = False
        for task in removed:
            index = self._index_of(task)
            if index in dropped:
                raise ValueError(f"task {task.task_id} is not queued as given")
            dropped.add(index)
            events.append((index, _DROP, None))
            queue._count(task, -1)
            narrowed = narrowed or task.submitted_at in (self.submitted_bounds or ())
        for task in sorted(added, key=self._key):
            events.append((bisect_left(self.tasks, self._key(task), key=self._key), _INSERT, queue._row(task)))
            queue._count(task, 1)
        events.sort(key=_EVENT_ORDER)  # stable: insertions at one index stay in key order, before a drop there
        for slot, name in enumerate(_COLUMNS):
            setattr(queue, name, _merged(getattr(self, name), events, slot))
        queue._refuse_duplicates(events)
        queue._refresh_near_next(events)
        if narrowed:
            queue.submitted_bounds = _span(queue.tasks)
        return queue

    def _index_of(self, task: QueuedTask) -> int:
        index = bisect_left(self.tasks, kept_key(task, self.order, self.rate), key=self._key)
        if index == len(self.tasks) or self.tasks[index] != task:
            raise ValueError(f"task {task.task_id} is not queued as given")
        return index

    def _row(self, task: QueuedTask) -> tuple:
        """A new task's entry in each column (`_COLUMNS`' order)."""
        runtimes = runtimes_of(task)
        return (task, _CLASS_OFFSETS[task.priority_class], self.rate * task.submitted_at - task.priority,
                flags_of(task), self._project(task), self._shape_id(task), task.task_id, task.submitted_at,
                longest_runtime(task), runtimes, grace_bits(runtimes, self.grace_s), 1)  # near_next: `_refresh_near_next`

    def _count(self, task: QueuedTask, sign: int) -> None:
        """The counts kept over the whole queue, with the task added (1) or taken out (-1)."""
        self._count_core(task, sign)
        self.priorities[task.priority] += sign
        if not self.priorities[task.priority]:
            del self.priorities[task.priority]
        self.with_deadline += sign * (task.deadline is not None)
        if sign > 0:
            low, high = self.submitted_bounds or (task.submitted_at, task.submitted_at)
            self.submitted_bounds = (min(low, task.submitted_at), max(high, task.submitted_at))

    def _refuse_duplicates(self, events: list[tuple[int, int, tuple | None]]) -> None:
        """An added task whose id the next task in the new order has (an equal key: the same id) was queued
        already — or added twice."""
        tasks, position = self.tasks, 0
        for index, kind, row in events:  # the new position of each added task, in the same pass as `_merged`
            if kind == _INSERT:
                at = index + position
                position += 1
                if at + 1 < len(tasks) and tasks[at + 1].task_id == row[0].task_id:
                    raise ValueError(f"task {row[0].task_id} is queued already")
            else:
                position -= 1

    def _refresh_near_next(self, events: list[tuple[int, int, tuple | None]]) -> None:
        """`near_next` (merged as a column, an added task's entry 1) said afresh for every pair of neighbours the
        events made: an added task and each of its neighbours, and the two tasks either side of a dropped one."""
        touched, position = [], 0
        for index, kind, _ in events:  # the new positions, in the same pass as `_merged`
            if kind == _INSERT:
                at = index + position
                position += 1
                touched += (at - 1, at)
            else:
                touched.append(index + position - 1)
                position -= 1
        near, aged, last = self.near_next, self.aged, len(self.aged) - 1
        for at in touched:
            if 0 <= at <= last:
                near[at] = at < last and not aged[at + 1] - aged[at] >= NEAR_GAP

    def with_tasks(self, tasks: Sequence[QueuedTask]) -> OrderedQueue:
        """These tasks — mostly this queue's own task objects (a filtered or partly replaced copy of it) —
        as a kept queue: this one changed by the difference, found by identity. Unique ids, as always."""
        if tasks is self:
            return self
        given = {id(task) for task in tasks}
        mine = {id(task) for task in self.tasks}
        removed = [task for task in self.tasks if id(task) not in given]
        added = [task for task in tasks if id(task) not in mine]
        return self.changed(added, removed) if removed or added else self

    def _shape_id(self, task: QueuedTask) -> int:
        return self._shape_number((task.gpus, task.heavy, tuple(map(_CARD_TYPE, task.options))))

    def _shape_number(self, shape: tuple[int, bool, tuple[str, ...]]) -> int:
        known = self._shape_ids.get(shape)
        if known is None:
            known = self._shape_ids[shape] = len(self._shape_ids)
            self.shape_table.append(shape)
        return known

    def _project(self, task: QueuedTask) -> str:
        """The task's project as the one string object this queue (and the queues made from it) keeps for the
        name: the walk's `project in limited` then compares identities, without reading each task's string."""
        return self._project_names.setdefault(task.project, task.project)

    def _count_core(self, task: QueuedTask, sign: int) -> None:
        """Add (1) or take out (-1) a core task's GPUs on each card type it accepts (`core_gpus`)."""
        if task.priority_class != PriorityClass.CORE:
            return
        core_gpus = self.core_gpus
        for option in task.options:
            left = core_gpus.get(option.card_type, 0) + sign * task.gpus
            if left:
                core_gpus[option.card_type] = left
            else:
                core_gpus.pop(option.card_type, None)

    def walk_columns(self, positions: list[int] | None, grace_s: float) -> WalkColumns:
        """The columns of the tasks at these positions (None: all, in the kept order), their `grace_bits` for
        this preemption grace (worked out afresh if the queue was made for another)."""
        bits = self.grace_bits
        if grace_s != self.grace_s:
            bits = array("q", [grace_bits(runtimes, grace_s) for runtimes in self.runtimes])
        if positions is None:
            return WalkColumns(self.flags, self.projects, self.shapes, self.task_ids, self.core_gpus, self.submitted,
                               self.longest, self.shape_table, self.runtimes, bits)
        return WalkColumns([self.flags[i] for i in positions], [self.projects[i] for i in positions],
                           [self.shapes[i] for i in positions], [self.task_ids[i] for i in positions], self.core_gpus,
                           [self.submitted[i] for i in positions], [self.longest[i] for i in positions], self.shape_table,
                           [self.runtimes[i] for i in positions], [bits[i] for i in positions])

    def walk_columns_moved(self, moves: Sequence[tuple[int, Sequence[int]]], grace_s: float) -> WalkColumns:
        """`walk_columns` of the kept order with a few runs reordered (`settle_ties`' moves: each run's start and the
        positions, in the kept order, of the tasks now at start, start + 1, ...): each column copied once (C-level)
        and only the moved runs written again — not a rebuild of every column from 100,000 positions."""
        kept = self.walk_columns(None, grace_s)
        columns = {name: copy(getattr(kept, name)) for name in _PER_TASK}
        for name, column in columns.items():
            source = getattr(kept, name)
            for start, positions in moves:
                for at, position in enumerate(positions, start):
                    column[at] = source[position]
        return replace(kept, **columns)

    def _key(self, task: QueuedTask) -> tuple:
        return kept_key(task, self.order, self.rate)

    def __len__(self) -> int:
        return len(self.tasks)

    @overload
    def __getitem__(self, index: int) -> QueuedTask: ...

    @overload
    def __getitem__(self, index: slice) -> list[QueuedTask]: ...

    def __getitem__(self, index):
        return self.tasks[index]

    def __iter__(self) -> Iterator[QueuedTask]:
        return iter(self.tasks)

    def __repr__(self) -> str:
        return f"OrderedQueue({self.order!r}, {len(self.tasks)} tasks)"


# The per-task fields of `WalkColumns` (the others, `core_gpus` and `shape_table`, are of the whole queue).
_PER_TASK = ("flags", "projects", "shapes", "task_ids", "submitted", "longest", "runtimes", "grace_bits")
_INSERT, _DROP = 0, 1  # `changed`'s events at one index: insertions go before the task there, which may be dropped
_EVENT_ORDER = itemgetter(0, 1)
# The per-task columns, in `OrderedQueue._row`'s order.
_COLUMNS = ("tasks", "offsets", "aged", "flags", "projects", "shapes", "task_ids", "submitted", "longest", "runtimes",
            "grace_bits", "near_next")


def _merged(column, events: list[tuple[int, int, tuple | None]], slot: int):
    """A copy of the column (a list or an array) with the events applied: each insertion's row value at `slot`
    before the task at its index, each dropped task left out."""
    merged, last = column[:0], 0
    for index, kind, row in events:
        merged += column[last:index]
        if kind == _INSERT:
            merged.append(row[slot])
            last = index
        else:
            last = index + 1
    merged += column[last:]
    return merged


def _span(tasks: list[QueuedTask]) -> tuple[float, float] | None:
    """(earliest, latest) submit time of the tasks."""
    if not tasks:
        return None
    submitted = [task.submitted_at for task in tasks]
    return (min(submitted), max(submitted))
