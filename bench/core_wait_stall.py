"""Why a policy's core p95 wait is what it is: what the fleet did while the p95 core task waited.

For each policy, over one simulated run: the core task whose wait is the core p95 (the smallest wait
at or above it), how many GPUs were free when it was submitted, how many tasks finished (gave GPUs
back) from then until it started, and how long after its submission the first task finished. A p95
task that waits for the first finish of a full fleet shows a stall — every GPU held by long work
when a burst arrives — rather than an ordering choice. Diagnosis of issue 10's 5,000-job Philly run
(docs/BENCHMARKS.md, "Core p95 wait on the 5,000-job run"):

    nice -n 15 .venv/bin/python bench/core_wait_stall.py --trace ../shared/traces/philly/philly_jobs_3vc.csv \\
        --format philly --cluster V100:14x8 --limit 5000 --synthesize 42 --policy cardflow --policy easy-backfill

`--variant FIELD=VALUE` (repeatable) adds cardflow with those Policy fields changed as one more column
(the same syntax as `bench/policies.py --grid-set`).
"""

from __future__ import annotations

import argparse
import bisect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from shared.scheduling.model import PriorityClass
from shared.simulation.engine import Outcome
from shared.simulation.metrics import utilisation_when_queued, window

_HOUR = 3600.0


@dataclass(frozen=True)
class Stall:
    """The p95 core task of one run and what the fleet did while it waited (times in seconds)."""

    core_tasks: int
    p95_wait_s: float
    mean_wait_s: float
    waiting_100h: int  # core tasks that waited 100 hours or more
    task_id: str  # the p95 core task: the smallest wait at or above the p95
    submitted_s: float
    started_s: float
    free_gpus_then: int  # GPUs no lease held across its submission
    finishes_while_waiting: int  # tasks that finished after its submission, up to its start
    first_finish_after_s: float | None  # from its submission to the first finish after it
    utilisation: float  # useful GPU-seconds / capacity over the submission window
    busy_when_queued: float  # the same while ready work waited
    preemptions: int
    unfinished: int


def held_gpus(outcome: Outcome, at: float) -> int:
    """GPUs held by leases across the instant `at` (started before it, ending after it): doing useful
    work, work later lost, or idle waiting for data. GPUs given back at `at` count as free."""
    recorder = outcome.recorder
    return sum(gpus for segments in (recorder.useful, recorder.lost, recorder.idle)
               for start, end, gpus in segments if start < at < end)


def stall(outcome: Outcome, capacity: int) -> Stall | None:
    """What the fleet did while the p95 core task of one run waited (None without core tasks that started)."""
    waits = outcome.recorder.waits
    core = [task for task in outcome.tasks if task.priority_class == PriorityClass.CORE and task.task_id in waits]
    if not core:
        return None
    values = np.array([waits[task.task_id] for task in core])
    p95 = float(np.percentile(values, 95))
    task = min((task for task in core if waits[task.task_id] >= p95),
               key=lambda task: (waits[task.task_id], task.submit_s, task.task_id))
    submitted, started = task.submit_s, task.submit_s + waits[task.task_id]
    submit = {item.task_id: item.submit_s for item in outcome.tasks}
    finishes = sorted(submit[task_id] + jct for task_id, jct in outcome.recorder.jcts.items() if task_id in submit)
    first = bisect.bisect_right(finishes, submitted)
    first_finish = finishes[first] - submitted if first < len(finishes) else None
    lo, hi = window(outcome.tasks)
    useful = sum(max(0.0, min(end, hi) - max(start, lo)) * gpus for start, end, gpus in outcome.recorder.useful)
    return Stall(len(core), p95, float(values.mean()), int((values >= 100 * _HOUR).sum()), task.task_id,
                 submitted, started, capacity - held_gpus(outcome, submitted),
                 bisect.bisect_right(finishes, started) - first, first_finish,
                 useful / (capacity * (hi - lo)), utilisation_when_queued(outcome.recorder, capacity, lo, hi),
                 outcome.recorder.preemptions, outcome.unfinished)


def stall_table(stalls: dict[str, Stall | None], origin: float) -> Table:
    """Policies as columns; times of day counted from `origin` (the first submission)."""
    table = Table(title="the p95 core task and the fleet while it waited", title_justify="left")
    table.add_column("metric", style="bold")
    for name in stalls:
        table.add_column(name, justify="right")

    def row(label: str, render) -> None:
        table.add_row(label, *["-" if item is None else render(item) for item in stalls.values()])

    row("core tasks", lambda s: f"{s.core_tasks:,}")
    row("core wait mean / p95", lambda s: f"{s.mean_wait_s / _HOUR:.1f} h / {s.p95_wait_s / _HOUR:.1f} h")
    row("core tasks waiting 100 h or more", lambda s: f"{s.waiting_100h:,}")
    row("the p95 core task", lambda s: s.task_id)
    row("  submitted / started", lambda s: f"day {(s.submitted_s - origin) / 86400:.2f} / "
                                           f"day {(s.started_s - origin) / 86400:.2f}")
    row("  GPUs free when it was submitted", lambda s: f"{s.free_gpus_then}")
    row("  tasks finished while it waited", lambda s: f"{s.finishes_while_waiting:,}")
    row("  first finish after its submission",
        lambda s: "-" if s.first_finish_after_s is None else f"{s.first_finish_after_s / _HOUR:.2f} h")
    row("utilisation", lambda s: f"{100 * s.utilisation:.2f}%")
    row("busy while ready work waits", lambda s: f"{100 * s.busy_when_queued:.2f}%")
    row("preemptions", lambda s: f"{s.preemptions:,}")
    row("unfinished tasks", lambda s: f"{s.unfinished:,}")
    return table


def main(argv: Sequence[str] | None = None) -> None:
    from shared.scheduling.policies import POLICIES
    from shared.simulation.cluster import load_cluster
    from shared.simulation.matching import CatalogCardModel
    from shared.simulation.runner import new_progress, prepare_scenario, run_policies
    from shared.simulation.traces import load_trace

    from policies_grid import variant  # bench/ is on sys.path when run as a script

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--format", default="philly")
    parser.add_argument("--cluster", required=True, help="fleet spec, e.g. V100:14x8")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks by submit time")
    parser.add_argument("--synthesize", type=int, default=42, metavar="SEED", help="synthesis seed (default 42)")
    parser.add_argument("--policy", action="append", default=None, help="preset; repeat (default cardflow, easy-backfill)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, one policy each")
    parser.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE",
                        help="also run cardflow with these Policy fields changed (repeat for several fields)")
    args = parser.parse_args(argv)
    names = args.policy or ["cardflow", "easy-backfill"]
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        parser.error(f"unknown policy {unknown[0]!r}; presets: {', '.join(POLICIES)}")
    policies = [POLICIES[name] for name in names]
    if args.variant:
        changed = variant(POLICIES["cardflow"], args.variant)
        policies.append(replace(changed, name="cardflow + " + " ".join(args.variant)))
    trace = load_trace(args.trace, args.format)
    scenario = prepare_scenario(trace, CatalogCardModel(), cluster=load_cluster(args.cluster),
                                synthesize_seed=args.synthesize, limit=args.limit)
    with new_progress() as progress:
        outcomes = run_policies(scenario, policies, progress=progress, jobs=args.jobs)
    capacity = scenario.cluster.capacity
    origin = min(task.submit_s for task in scenario.tasks)
    Console().print(stall_table({name: stall(outcome, capacity) for name, outcome in outcomes.items()}, origin))


if __name__ == "__main__":
    main()
