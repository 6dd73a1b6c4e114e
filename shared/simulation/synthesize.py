"""Fill what a trace does not say — class, estimate, data readiness, checkpointing — from seeded draws.

Only fields the trace left open (`None`) are filled; every task draws from its own generator
seeded by `(seed, task_id)`, so results do not depend on task order or on `--limit`. The defaults
are documented in docs/traces.md and printed with every result (`SynthesisParams.describe()`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, replace

from shared.scheduling.model import PriorityClass
from shared.simulation.workload import Trace, TraceTask

DEFAULT_SEED = 42


@dataclass(frozen=True, slots=True)
class SynthesisParams:
    """Knobs of the synthetic parts of a workload."""

    class_mix: dict[str, float] = field(
        default_factory=lambda: {"core": 0.2, "standard": 0.5, "opportunistic": 0.3}
    )
    # estimate = duration x LogNormal(mu, sigma): median over-estimate x2, ~12% under-estimates
    estimate_mu: float = math.log(2.0)
    estimate_sigma: float = 0.6
    min_estimate_s: float = 60.0  # nobody asks for less than a minute
    ready_share: float = 0.2  # share of tasks whose data arrives after submission
    ready_delay_mean_s: float = 600.0  # exponential delay until their data is ready
    checkpoint_share: float = 0.8  # share of tasks that checkpoint
    checkpoint_interval_s: float = 1800.0
    quota_factor: float = 3.0  # quota = factor x the project's demand (GPU-hours); generous: estimates are charged
    quota_grace_s: float = 86400.0  # quota expires this long after the project's last submission

    def describe(self, seed: int) -> dict[str, object]:
        """The parameters as plain data, for tables and JSON."""
        return {"seed": seed, **asdict(self)}


def _draw_class(rng: random.Random, mix: dict[str, float]) -> PriorityClass:
    point, total = rng.random() * sum(mix.values()), 0.0
    for name, weight in mix.items():
        total += weight
        if point < total:
            return PriorityClass(name)
    return PriorityClass(list(mix)[-1])


def synthesize_task(task: TraceTask, seed: int, params: SynthesisParams) -> TraceTask:
    """One task with its open fields drawn (draws happen in a fixed order whatever is open)."""
    rng = random.Random(f"{seed}:{task.task_id}")
    klass = _draw_class(rng, params.class_mix)
    noise = rng.lognormvariate(params.estimate_mu, params.estimate_sigma)
    estimate = max(params.min_estimate_s, task.duration_s * noise)
    delayed = rng.random() < params.ready_share
    delay = rng.expovariate(1.0 / params.ready_delay_mean_s) if params.ready_delay_mean_s > 0 else 0.0
    checkpoints = rng.random() < params.checkpoint_share
    return replace(
        task,
        priority_class=task.priority_class or klass,
        estimate_s=task.estimate_s if task.estimate_s is not None else estimate,
        ready_s=task.ready_s if task.ready_s is not None else task.submit_s + (delay if delayed else 0.0),
        checkpoint_interval_s=task.checkpoint_interval_s
        if task.checkpoint_interval_s is not None
        else (params.checkpoint_interval_s if checkpoints else None),
    )


def synthesize(trace: Trace, seed: int = DEFAULT_SEED, params: SynthesisParams | None = None) -> Trace:
    """The trace with every open field filled; the parameters are recorded in its notes."""
    params = params or SynthesisParams()
    tasks = [synthesize_task(task, seed, params) for task in trace.tasks]
    return trace.with_tasks(tasks, synthesis=params.describe(seed))
