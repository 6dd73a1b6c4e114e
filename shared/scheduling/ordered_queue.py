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
differ; the re-sort settles it).

A value: `of` sorts a queue once; `changed` returns a new `OrderedQueue` with some tasks added and
removed (a changed task: removed as it was, added as it is) — a copy of its columns plus a binary
search per change, a few milliseconds at 100,000 tasks.
It is a `Sequence[QueuedTask]`, so `plan()` takes it wherever it takes a queue and decides exactly as
for the same tasks in a list; the dispatcher and the simulator keep one and update it from their changes.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from copy import copy
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from math import inf
from typing import overload

from shared.scheduling.model import Policy, PriorityClass, QueuedTask
from shared.scheduling.quota import SECONDS_PER_HOUR

_CLASS_RANK = {cls: cls.rank for cls in PriorityClass}
_CLASS_OFFSETS = {cls: cls.rank * float(2**30) for cls in PriorityClass}  # = ordering._RANK


def aging_rate(policy: Policy) -> float:
    """Aging in points per second: the policy's rate for the cardflow order, 0 for the others."""
    return policy.aging_per_hour / SECONDS_PER_HOUR if policy.order == "cardflow" else 0.0


def kept_key(task: QueuedTask, order: str, rate: float) -> tuple:
    """The `now`-free sort key of a task: (class rank, aged, submitted, task id); fifo: (submitted, task id).
    `aged` is computed with the same float operations as the cycle's key (`ordering._fast_keys`)."""
    if order == "fifo":
        return (task.submitted_at, task.task_id)
    return (_CLASS_RANK[task.priority_class], rate * task.submitted_at - task.priority, task.submitted_at, task.task_id)


# `flags_of`: data ready; has card options; approved; core class; opportunistic class; checkpoints
READY, MATCHED, APPROVED, CORE, OPPORTUNISTIC, CHECKPOINTS = 1, 2, 4, 8, 16, 32
FLAG_VALUES = range(64)  # every value `flags_of` can take


def flags_of(task: QueuedTask) -> int:
    return ((READY * task.data_ready) | (MATCHED * bool(task.options)) | (APPROVED * task.approved)
            | (CORE * (task.priority_class == PriorityClass.CORE))
            | (OPPORTUNISTIC * (task.priority_class == PriorityClass.OPPORTUNISTIC))
            | (CHECKPOINTS * (task.checkpoint_interval_s is not None)))


def grace_bits(runtimes: Sequence[float], grace_s: float) -> int:
    """1 followed by one bit per card option in matcher order: its runtime is within `grace_s` (the
    preemption grace). -1 for more options than a 64-bit column holds (the walk works them out itself)."""
    if len(runtimes) > _MOST_BITS:
        return -1
    bits = 1
    for runtime_s in runtimes:
        bits = bits + bits + (runtime_s <= grace_s)
    return bits


_MOST_BITS = 62


def runtimes_of(task: QueuedTask) -> array:
    """The task's runtime per card option, in matcher order, as one small array (read without the options)."""
    return array("d", [option.runtime_s for option in task.options])


def longest_runtime(task: QueuedTask) -> float:
    """The task's longest runtime over its card options (0 without options; inf if one is not a number,
    so that a check against it never passes where one against each option would not)."""
    longest = 0.0
    for option in task.options:
        runtime_s = option.runtime_s
        if runtime_s != runtime_s:
            return inf
        if runtime_s > longest:
            longest = runtime_s
    return longest


@dataclass(frozen=True, slots=True)
class WalkColumns:
    """Per task of a walk, in its order: `flags_of` it, its project, the number of its (GPUs, heavy, card
    types), its id, its submit time, its `longest_runtime`, its `runtimes_of` and their `grace_bits`. Two tasks with the same shape number have
    the same GPUs, heaviness and card types: `shape_table[number]` is that (GPUs, heavy, card types).
    And for the whole queue: `core_gpus`, the GPUs its core tasks ask for per card type (each task on
    every card type it accepts: `headroom.core_demand`'s queued part)."""

    flags: Sequence[int]
    projects: Sequence[str]
    shapes: Sequence[int]
    task_ids: Sequence[str]
    core_gpus: Mapping[str, int]
    submitted: Sequence[float]
    longest: Sequence[float]
    shape_table: Sequence[tuple[int, bool, tuple[str, ...]]]
    runtimes: Sequence[Sequence[float]]
    grace_bits: Sequence[int]


class OrderedQueue(Sequence[QueuedTask]):
    """Queued tasks in their `now`-free order (`kept_key`), for one queue order and aging rate.

    Besides the tasks, two float columns in the same order give the cycle's float keys without reading
    the tasks: `offsets` (the class offset of `ordering`) and `aged`; `submitted` and `longest` (each task's
    submit time and `longest_runtime`), `runtimes` (`runtimes_of` each) and `grace_bits` (for the preemption
    grace `grace_s` of the policy it was made for) let the walk decide most tasks without reading them. `submitted_bounds` and `priorities`
    (a count per priority) let `ordering` check that its float key is exact; `with_deadline` counts the
    tasks with a deadline. Three more columns let the walk tell, without reading a task, that it is
    deferred like an earlier one (`WalkColumns`): `flags` (`READY`, `MATCHED`, `APPROVED`, `CORE`, `OPPORTUNISTIC`,
    `CHECKPOINTS`), `projects` (one string object
    per project name), and `shapes` — the number of the task's (GPUs, heavy, card types),
    in a table shared by the queues made from this one (`shape_table`) — and `task_ids`; `core_gpus` sums what its core tasks ask for per card type (the
    queued part of the headroom's core demand, kept instead of counted every cycle). Never mutated (the
    shape table only grows): `changed` makes a new one.
    """

    __slots__ = ("order", "rate", "tasks", "offsets", "aged", "submitted_bounds", "priorities", "with_deadline",
                 "flags", "projects", "shapes", "task_ids", "core_gpus", "submitted", "longest", "_shape_ids",
                 "shape_table", "_project_names", "runtimes", "grace_s",
                 "grace_bits")

    def __init__(self, order: str, rate: float, tasks: list[QueuedTask], priorities: Counter[int],
                 submitted_bounds: tuple[float, float] | None = None, grace_s: float = 0.0) -> None:
        self.order, self.rate, self.tasks, self.priorities, self.grace_s = order, rate, tasks, priorities, grace_s
        self.offsets = array("d", [_CLASS_OFFSETS[task.priority_class] for task in tasks])
        self.aged = array("d", [rate * task.submitted_at - task.priority for task in tasks])
        self.submitted_bounds = submitted_bounds if submitted_bounds is not None or not tasks else _span(tasks)
        self.with_deadline = sum(task.deadline is not None for task in tasks)
        self._shape_ids: dict[tuple, int] = {}
        self._project_names: dict[str, str] = {}  # one string object per project name (`_project`)
        self.shape_table: list[tuple[int, bool, tuple[str, ...]]] = []  # shape number -> (GPUs, heavy, card types)
        self.flags = array("b", map(flags_of, tasks))
        self.projects = [self._project(task) for task in tasks]
        self.shapes = array("i", [self._shape_id(task) for task in tasks])
        self.task_ids = [task.task_id for task in tasks]
        self.submitted = array("d", [task.submitted_at for task in tasks])
        self.longest = array("d", map(longest_runtime, tasks))
        self.runtimes = list(map(runtimes_of, tasks))
        self.grace_bits = array("q", [grace_bits(runtimes, grace_s) for runtimes in self.runtimes])
        self.core_gpus: dict[str, int] = {}
        for task in tasks:
            self._count_core(task, 1)

    @classmethod
    def of(cls, tasks: Iterable[QueuedTask], policy: Policy) -> OrderedQueue:
        """These tasks (unique ids) sorted for the policy's queue order."""
        order, rate = policy.order, aging_rate(policy)
        ordered = sorted(tasks, key=partial(kept_key, order=order, rate=rate))
        return cls(order, rate, ordered, Counter(task.priority for task in ordered), grace_s=policy.preempt_after_s)

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
                longest_runtime(task), runtimes, grace_bits(runtimes, self.grace_s))

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
        shape = (task.gpus, task.heavy, tuple([option.card_type for option in task.options]))
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


_INSERT, _DROP = 0, 1  # `changed`'s events at one index: insertions go before the task there, which may be dropped
_EVENT_ORDER = itemgetter(0, 1)
# The per-task columns, in `OrderedQueue._row`'s order.
_COLUMNS = ("tasks", "offsets", "aged", "flags", "projects", "shapes", "task_ids", "submitted", "longest", "runtimes",
            "grace_bits")


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
