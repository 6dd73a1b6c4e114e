"""The arithmetic of a simulated run: where it starts, which milestones it passes, when, and its output.

Pure. A grant says the task runs `estimated_runtime_s` on this card; at time scale X that is
R / X real seconds for the whole task. A run resumed from `sim://<task>/<progress>` starts at that
progress and runs the remaining share. Milestones, in progress order:

- `checkpoint` every `checkpoint_interval_s / estimated_runtime_s` of progress after the start;
- `progress` reports every `progress_step` (thinned so they are at least `min_report_gap_s` real
  seconds apart, which keeps very fast runs from flooding `cf:reports`);
- then exactly one end: `fail` at `CARDFLOW_SIM_FAIL_AT` (if it lies ahead), else `done` at 1.0.

Task env knobs (simulation only): `CARDFLOW_SIM_FAIL_AT` (progress, 0..1), `CARDFLOW_SIM_EXIT_CODE`
(default 1), `CARDFLOW_SIM_UTIL` (reported GPU utilisation %), `CARDFLOW_SIM_UNITS_PER_S`
(output units per second of estimated runtime, default 100). The reported utilisation is the
submission label `sim_util_pct` if set, else `CARDFLOW_SIM_UTIL`, else 90 (`DEFAULT_UTIL_PCT`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Mapping

from shared.events.reports import LeaseGrantOrder

FAIL_AT_ENV = "CARDFLOW_SIM_FAIL_AT"
EXIT_CODE_ENV = "CARDFLOW_SIM_EXIT_CODE"
UTIL_ENV = "CARDFLOW_SIM_UTIL"
UTIL_LABEL = "sim_util_pct"
DEFAULT_UTIL_PCT = 90.0
UNITS_PER_S_ENV = "CARDFLOW_SIM_UNITS_PER_S"
DEFAULT_UNITS_PER_S = 100.0
MAX_MILESTONES = 100_000

_SIM_URI = re.compile(r"^sim://(?P<task>[^/]+)/(?P<progress>[0-9.eE+-]+)$")


class Milestone(StrEnum):
    CHECKPOINT = "checkpoint"
    PROGRESS = "progress"
    FAIL = "fail"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class SimRunPlan:
    """One simulated run of a lease."""

    task_id: str
    start_progress: float
    real_seconds_per_task: float  # real seconds the WHOLE task (0 -> 1) takes at this time scale
    checkpoint_step: float | None  # progress between checkpoints, None = no periodic checkpoints
    progress_step: float | None
    fail_at: float | None
    exit_code: int
    units_per_task: float  # output units of the whole task

    def milestones(self) -> list[tuple[float, Milestone]]:
        """Every milestone after the start, in progress order, ending with exactly one FAIL or DONE."""
        end, last = (self.fail_at, Milestone.FAIL) if self.fail_at is not None else (1.0, Milestone.DONE)
        found = [(p, Milestone.CHECKPOINT) for p in _steps(self.start_progress, end, self.checkpoint_step)]
        found += [(p, Milestone.PROGRESS) for p in _steps(self.start_progress, end, self.progress_step)]
        found.sort(key=lambda item: (item[0], item[1] != Milestone.CHECKPOINT))
        return [*found, (end, last)]

    def seconds_between(self, from_progress: float, to_progress: float) -> float:
        """Real seconds to advance from one progress to another."""
        return max(0.0, to_progress - from_progress) * self.real_seconds_per_task

    def progress_after(self, from_progress: float, elapsed_s: float) -> float:
        """Progress reached `elapsed_s` real seconds after `from_progress` (capped at 1)."""
        if self.real_seconds_per_task <= 0:
            return 1.0
        return min(1.0, from_progress + elapsed_s / self.real_seconds_per_task)

    def output_units(self, progress: float) -> float:
        """Output of this run up to `progress` (what was done before the resume point is not counted)."""
        return round(max(0.0, progress - self.start_progress) * self.units_per_task, 6)


def plan_sim_run(
    order: LeaseGrantOrder, time_scale: float, *, progress_step: float | None = 0.1, min_report_gap_s: float = 1.0
) -> SimRunPlan:
    """The plan of a granted lease's simulated run on this agent."""
    if time_scale <= 0:
        raise ValueError("time_scale must be > 0")
    real_per_task = order.estimated_runtime_s / time_scale
    start = resume_progress(order.resume_from, order.task_id)
    fail_at = _float_env(order.env, FAIL_AT_ENV)
    units_per_s = _float_env(order.env, UNITS_PER_S_ENV)
    return SimRunPlan(
        task_id=order.task_id,
        start_progress=start,
        real_seconds_per_task=real_per_task,
        checkpoint_step=(
            order.checkpoint_interval_s / order.estimated_runtime_s if order.checkpoint_interval_s else None
        ),
        progress_step=_thinned(progress_step, min_report_gap_s, real_per_task),
        fail_at=fail_at if fail_at is not None and start < fail_at <= 1.0 else None,
        exit_code=int(_float_env(order.env, EXIT_CODE_ENV) or 1),
        units_per_task=(DEFAULT_UNITS_PER_S if units_per_s is None else units_per_s) * order.estimated_runtime_s,
    )


def resume_progress(resume_from: str | None, task_id: str) -> float:
    """The progress a `sim://<task>/<progress>` checkpoint encodes; 0 for none or a foreign one."""
    if not resume_from:
        return 0.0
    match = _SIM_URI.match(resume_from)
    if match is None or match["task"] != task_id:
        return 0.0
    try:
        value = float(match["progress"])
    except ValueError:
        return 0.0
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


def checkpoint_uri(task_id: str, progress: float) -> str:
    """The checkpoint reference a simulated run reports (and later resumes from)."""
    return f"sim://{task_id}/{progress:.6f}"


def simulated_util(env: Mapping[str, str], labels: Mapping[str, str] | None = None) -> float:
    """The utilisation a simulated run reports: its label `sim_util_pct`, else `CARDFLOW_SIM_UTIL`, else 90."""
    value = _float_env(labels or {}, UTIL_LABEL)
    if value is None:
        value = _float_env(env, UTIL_ENV)
    return DEFAULT_UTIL_PCT if value is None else min(100.0, max(0.0, value))


def _steps(start: float, end: float, step: float | None) -> list[float]:
    """`start + k*step` for k >= 1, strictly before `end` (at most MAX_MILESTONES of them)."""
    if not step or step <= 0:
        return []
    count = min(MAX_MILESTONES, math.ceil((end - start) / step) - 1)
    points = [round(start + k * step, 9) for k in range(1, count + 1)]
    return [p for p in points if p < end - 1e-9]


def _thinned(step: float | None, min_gap_s: float, real_per_task: float) -> float | None:
    if not step or step <= 0:
        return None
    if real_per_task <= 0:
        return None
    return max(step, min_gap_s / real_per_task)


def _float_env(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
