"""What a kept queue knows of each task without reading it again: `flags_of`, `runtimes_of`, `longest_runtime`,
`grace_bits` — one value per task, kept as columns by `OrderedQueue` and handed to a cycle's walks as `WalkColumns`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import inf
from operator import attrgetter

from shared.scheduling.model import PriorityClass, QueuedTask

_RUNTIME = attrgetter("runtime_s")


# `flags_of`: data ready; has card options; approved; core class; opportunistic class; checkpoints
READY, MATCHED, APPROVED, CORE, OPPORTUNISTIC, CHECKPOINTS = 1, 2, 4, 8, 16, 32
FLAG_VALUES = range(64)  # every value `flags_of` can take


_CLASS_FLAGS = {cls: (CORE * (cls == PriorityClass.CORE)) | (OPPORTUNISTIC * (cls == PriorityClass.OPPORTUNISTIC))
                for cls in PriorityClass}


def flags_of(task: QueuedTask) -> int:
    return flags_column([task], [task.priority_class])[0]


def flags_column(tasks: Sequence[QueuedTask], classes: Sequence[PriorityClass]) -> list[int]:
    """`flags_of` each task, given their classes."""
    return [_CLASS_FLAGS[klass] | (READY * task.data_ready) | (MATCHED * bool(task.options))
            | (APPROVED * task.approved) | (CHECKPOINTS * (task.checkpoint_interval_s is not None))
            for task, klass in zip(tasks, classes)]


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


def runtimes_of(task: QueuedTask) -> tuple[float, ...]:
    """The task's runtime per card option, in matcher order, as one small tuple (read without the options;
    it holds the options' own float objects, so reading it allocates nothing)."""
    return tuple(map(_RUNTIME, task.options))


def longest_runtime(task: QueuedTask) -> float:
    """The task's longest runtime over its card options (0 without options; inf if one is not a number,
    so that a check against it never passes where one against each option would not)."""
    return longest_of(runtimes_of(task))


def longest_of(runtimes: Sequence[float]) -> float:
    """`longest_runtime` of a task whose `runtimes_of` these are."""
    longest = 0.0
    for runtime_s in runtimes:
        if runtime_s != runtime_s:
            return inf
        if runtime_s > longest:
            longest = runtime_s
    return longest


def longest_column(runtimes: list[tuple[float, ...]]) -> list[float]:
    """`longest_of` each task's runtimes: the largest, found by C code, where every runtime is a number and
    the largest (and the sum, which is not a number if one is not) is not negative; else one by one."""
    longest = [max(task_runtimes) if task_runtimes else 0.0 for task_runtimes in runtimes]
    if all(map(_NOT_NEGATIVE, longest)) and all(map(_NOT_NEGATIVE, map(sum, runtimes))):
        return longest
    return list(map(longest_of, runtimes))


_NOT_NEGATIVE = (0.0).__le__  # False for a negative number and for one that is not a number


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
