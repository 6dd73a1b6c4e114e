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
from math import inf
from typing import overload

from shared.scheduling.model import Policy, PriorityClass, QueuedTask

_SECONDS_PER_HOUR = 3600.0
_CLASS_RANK = {cls: cls.rank for cls in PriorityClass}
_CLASS_OFFSETS = {cls: cls.rank * float(2**30) for cls in PriorityClass}  # = ordering._RANK


def aging_rate(policy: Policy) -> float:
    """Aging in points per second: the policy's rate for the cardflow order, 0 for the others."""
    return policy.aging_per_hour / _SECONDS_PER_HOUR if policy.order == "cardflow" else 0.0


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
        removed as it was and added as it is) and with the `added` ones. This queue is unchanged."""
        queue = copy(self)
        queue.tasks, queue.offsets, queue.aged = list(self.tasks), array("d", self.offsets), array("d", self.aged)
        queue.priorities = Counter(self.priorities)
        queue.flags, queue.projects, queue.shapes = array("b", self.flags), list(self.projects), array("i", self.shapes)
        queue.task_ids, queue.core_gpus = list(self.task_ids), dict(self.core_gpus)
        queue.submitted, queue.longest = array("d", self.submitted), array("d", self.longest)
        queue.runtimes, queue.grace_bits = list(self.runtimes), array("q", self.grace_bits)  # each task's array is never changed: shared
        narrowed = False
        for task in removed:
            queue._take_out(task)
            narrowed = narrowed or task.submitted_at in (queue.submitted_bounds or ())
        for task in added:
            queue._put_in(task)
        if narrowed:
            queue.submitted_bounds = _span(queue.tasks)
        return queue

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

    def _take_out(self, task: QueuedTask) -> None:
        index = bisect_left(self.tasks, kept_key(task, self.order, self.rate), key=self._key)
        if index == len(self.tasks) or self.tasks[index] != task:
            raise ValueError(f"task {task.task_id} is not queued as given")
        del self.tasks[index], self.offsets[index], self.aged[index]
        del self.flags[index], self.projects[index], self.shapes[index], self.task_ids[index]
        del self.submitted[index], self.longest[index], self.runtimes[index], self.grace_bits[index]
        self._count_core(task, -1)
        self.priorities[task.priority] -= 1
        if not self.priorities[task.priority]:
            del self.priorities[task.priority]
        self.with_deadline -= task.deadline is not None

    def _put_in(self, task: QueuedTask) -> None:
        index = bisect_left(self.tasks, kept_key(task, self.order, self.rate), key=self._key)
        if index < len(self.tasks) and self.tasks[index].task_id == task.task_id:
            raise ValueError(f"task {task.task_id} is queued already")
        self.tasks.insert(index, task)
        self.offsets.insert(index, _CLASS_OFFSETS[task.priority_class])
        self.aged.insert(index, self.rate * task.submitted_at - task.priority)
        self.flags.insert(index, flags_of(task))
        self.projects.insert(index, self._project(task))
        self.shapes.insert(index, self._shape_id(task))
        self.task_ids.insert(index, task.task_id)
        self.submitted.insert(index, task.submitted_at)
        self.longest.insert(index, longest_runtime(task))
        runtimes = runtimes_of(task)
        self.runtimes.insert(index, runtimes)
        self.grace_bits.insert(index, grace_bits(runtimes, self.grace_s))
        self._count_core(task, 1)
        self.priorities[task.priority] += 1
        self.with_deadline += task.deadline is not None
        low, high = self.submitted_bounds or (task.submitted_at, task.submitted_at)
        self.submitted_bounds = (min(low, task.submitted_at), max(high, task.submitted_at))

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


def _span(tasks: list[QueuedTask]) -> tuple[float, float] | None:
    """(earliest, latest) submit time of the tasks."""
    if not tasks:
        return None
    submitted = [task.submitted_at for task in tasks]
    return (min(submitted), max(submitted))
