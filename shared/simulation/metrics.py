"""What a simulation measured, and how it becomes the per-policy numbers of the report.

Definitions (also in docs/simulation.md):
- window = first to last submission; utilisation = GPU-seconds of useful work inside the window /
  (capacity x window). Useful = work that counts towards completion: progress lost to a preemption
  or a quota cut-off, and GPUs held idle while waiting for data, are not useful.
- bound = min(1, demand / (capacity x window)), demand = sum of gpus x run time (on the trace card)
  that could fall inside the window (from data-ready time, clipped at the window end).
- utilisation_when_queued = the same useful work, counted only while at least one task whose data is
  ready was queued (inside the window), over capacity x that time: how full a policy keeps the
  fleet while it has work it could start.
- wait = submission until the task's work first begins (waiting for data included); wait_after_ready
  = the same from the moment the task's data is ready (the part a scheduler controls);
  jct = submission until completion.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from shared.simulation.workload import SimTask


@dataclass(slots=True)
class Recorder:
    """Raw observations of one simulation run (appended to by the engine)."""

    useful: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, gpus)
    lost: list[tuple[float, float, int]] = field(default_factory=list)
    idle: list[tuple[float, float, int]] = field(default_factory=list)
    queue: list[tuple[float, int, int]] = field(default_factory=list)  # (time, queued, of them data-ready)
    waits: dict[str, float] = field(default_factory=dict)  # task_id -> wait
    jcts: dict[str, float] = field(default_factory=dict)  # task_id -> completion time
    deferrals: set[tuple[str, str]] = field(default_factory=set)  # distinct (task_id, reason enum)
    reservations: dict[str, float] = field(default_factory=dict)  # task_id -> last reservation start
    cost: float = 0.0
    preemptions: int = 0
    quota_cutoffs: int = 0
    plans: int = 0
    last_finish: float | None = None

    def lost_gpu_hours(self) -> float:
        return _gpu_seconds(self.lost) / 3600.0


def _gpu_seconds(segments: Iterable[tuple[float, float, int]], lo: float = -np.inf, hi: float = np.inf) -> float:
    """GPU-seconds of the segments inside [lo, hi]."""
    array = np.asarray(list(segments), dtype=float).reshape(-1, 3)
    overlap = np.clip(np.minimum(array[:, 1], hi) - np.maximum(array[:, 0], lo), 0.0, None)
    return float((overlap * array[:, 2]).sum())


def utilisation_when_queued(recorder: Recorder, capacity: int, lo: float, hi: float) -> float:
    """Share of the fleet doing useful work while at least one task whose data is ready was queued
    (a backlog the scheduler could serve), inside [lo, hi]."""
    busy, offered = busy_while_queued(recorder, capacity, lo, hi)
    return busy / offered if offered > 0 else 0.0


def busy_while_queued(recorder: Recorder, capacity: int, lo: float, hi: float) -> tuple[float, float]:
    """(useful GPU-seconds, capacity x seconds) over the time inside [lo, hi] while at least one task
    whose data is ready was queued: the two sums behind `utilisation_when_queued`, for pooling."""
    segments = np.asarray(recorder.useful, dtype=float).reshape(-1, 3)
    times = np.concatenate([segments[:, 0], segments[:, 1]])
    order = np.argsort(times, kind="stable")
    event_times = times[order]
    working = np.cumsum(np.concatenate([segments[:, 2], -segments[:, 2]])[order])
    queue_times = np.array([t for t, _, _ in recorder.queue], dtype=float)
    queue_sizes = np.array([ready for _, _, ready in recorder.queue], dtype=float)
    grid = np.unique(np.concatenate([event_times, queue_times, [lo, hi]]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    starts, lengths = grid[:-1], np.diff(grid)
    at = np.searchsorted(event_times, starts, side="right") - 1
    busy = np.where(at >= 0, working[np.clip(at, 0, None)], 0.0) if len(working) else np.zeros(len(starts))
    qi = np.searchsorted(queue_times, starts, side="right") - 1
    queued = np.where(qi >= 0, queue_sizes[np.clip(qi, 0, None)], 0.0) if len(queue_sizes) else np.zeros(len(starts))
    backlog = lengths * (queued > 0)
    return float((busy * backlog).sum()), float(capacity * backlog.sum())


def window(tasks: Iterable[SimTask]) -> tuple[float, float]:
    """First and last submission; a zero-length window is widened to one second."""
    submits = [task.submit_s for task in tasks]
    lo, hi = min(submits), max(submits)
    return lo, max(hi, lo + 1.0)


def demand_gpu_s(tasks: Iterable[SimTask], lo: float, hi: float) -> float:
    """GPU-seconds of work that could run inside [lo, hi]: each task from its data-ready time on,
    for its run time on its trace card, clipped at `hi`."""
    return sum(task.gpus * max(0.0, min(task.duration_s, hi - max(task.ready_s, lo))) for task in tasks)


def demand_bound(tasks: Iterable[SimTask], capacity: int, lo: float, hi: float) -> float:
    """min(1, demand inside [lo, hi] / (capacity x window))."""
    return min(1.0, demand_gpu_s(tasks, lo, hi) / (capacity * (hi - lo)))


def _stats(values: list[float], quantiles: tuple[int, ...]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, **{f"p{q}": 0.0 for q in quantiles}, "count": 0}
    array = np.asarray(values, dtype=float)
    points = np.percentile(array, quantiles)
    return {"mean": float(array.mean()), **{f"p{q}": float(p) for q, p in zip(quantiles, points)}, "count": len(values)}


def wait_by_class(recorder: Recorder, tasks: Iterable[SimTask],
                  after_ready: bool = False) -> dict[str, dict[str, float]]:
    """Wait statistics per class: from submission (or, `after_ready`, from data-ready) to work start."""
    by_class: dict[str, list[float]] = {}
    for task in tasks:
        if task.task_id in recorder.waits:
            wait = recorder.waits[task.task_id] - (task.ready_s - task.submit_s if after_ready else 0.0)
            by_class.setdefault(task.priority_class.value, []).append(wait)
    return {name: _stats(values, (50, 95, 99)) for name, values in sorted(by_class.items())}


def deadline_outcomes(recorder: Recorder, tasks: Iterable[SimTask]) -> dict[str, Any]:
    """Tasks with a deadline: how many, how many met it, and which missed it (finished after it, or not
    at all) with when they finished and how late (`finished_s`/`late_s` None: never finished)."""
    timed = [task for task in tasks if task.deadline_s is not None]
    missed: list[dict[str, Any]] = []
    for task in timed:
        assert task.deadline_s is not None
        jct = recorder.jcts.get(task.task_id)
        finished = None if jct is None else task.submit_s + jct
        if finished is None or finished > task.deadline_s:
            missed.append({"task_id": task.task_id, "deadline_s": task.deadline_s, "finished_s": finished,
                           "late_s": None if finished is None else finished - task.deadline_s})
    missed.sort(key=lambda row: (row["finished_s"] is None, -(row["late_s"] or 0.0), row["task_id"]))
    return {"with_deadline": len(timed), "met": len(timed) - len(missed), "missed": len(missed), "missed_tasks": missed}


def summarize(recorder: Recorder, tasks: list[SimTask], capacity: int, unfinished: int) -> dict[str, Any]:
    """The per-policy result block of the JSON report."""
    lo, hi = window(tasks)
    jct = _stats(list(recorder.jcts.values()), (95,))
    last = recorder.last_finish if recorder.last_finish is not None else lo
    return {
        "utilisation": _gpu_seconds(recorder.useful, lo, hi) / (capacity * (hi - lo)),
        "bound": demand_bound(tasks, capacity, lo, hi),
        "utilisation_when_queued": utilisation_when_queued(recorder, capacity, lo, hi),
        "wait_s": wait_by_class(recorder, tasks),
        "jct_s": {"mean": jct["mean"], "p95": jct["p95"]},
        "makespan_s": last - lo,
        "cost": recorder.cost,
        "preemptions": recorder.preemptions,
        "lost_gpu_hours": recorder.lost_gpu_hours(),
        "quota_cutoffs": recorder.quota_cutoffs,
        "deferrals": dict(sorted(Counter(str(reason) for _, reason in recorder.deferrals).items())),
        "wait_after_ready_s": wait_by_class(recorder, tasks, after_ready=True),
        "idle_gpu_hours": _gpu_seconds(recorder.idle) / 3600.0,
        "completed": len(recorder.jcts),
        "deadlines": deadline_outcomes(recorder, tasks),
        "unfinished": unfinished,
        "plans": recorder.plans,
    }


def step_series(points: list[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Time-average per bin of a step function given as (time, value-from-then-on) points."""
    if not points:
        return np.zeros(len(edges) - 1)
    times = np.array([t for t, _ in points], dtype=float)
    values = np.array([v for _, v in points], dtype=float)
    grid = np.union1d(edges, times)
    level = values[np.clip(np.searchsorted(times, grid[:-1], side="right") - 1, 0, None)]
    level[grid[:-1] < times[0]] = 0.0
    area = np.concatenate([[0.0], np.cumsum(level * np.diff(grid))])
    at_edges = np.interp(edges, grid, area)
    return np.diff(at_edges) / np.diff(edges)


def working_series(recorder: Recorder, edges: np.ndarray) -> np.ndarray:
    """Average number of GPUs doing useful work per bin."""
    deltas: dict[float, float] = {}
    for start, end, gpus in recorder.useful:
        deltas[start] = deltas.get(start, 0.0) + gpus
        deltas[end] = deltas.get(end, 0.0) - gpus
    times = sorted(deltas)
    levels = np.cumsum([deltas[t] for t in times]) if times else []
    return step_series(list(zip(times, levels)), edges)
