"""What holds the GPUs while core work waits past its grace: one grid unit, the cardflow preset beside variants.

Runs one grid unit (cell, Philly window, synthesis seed; bench/policies_grid.py) under the cardflow preset and
under each variant (`--variant "FIELD=VALUE ..."`, repeatable), and over every stretch between two plans inside
the measured window where a ready core task has waited past its preemption grace and still waits, averages
(time-weighted) who holds the GPUs — core work, standard work without checkpoints, standard work that
checkpoints, standard fillers that borrow the headroom (`RunningLease.borrowed_headroom`), opportunistic work,
nobody — and why those core tasks were deferred (the plan's reasons), and counts the grants and preemptions the
plans made meanwhile; and, over the whole run, the core p95 wait, the standard p95 and mean waits (what yielding
costs standard work) and the preemptions. Diagnosis behind docs/BENCHMARKS.md, "Tried or considered": why core
tasks wait behind fillers in core-heavy windows.

    nice -n 19 .venv/bin/python bench/core_wait_fillers.py --cell 0.5 0 0.3 core-heavy --window 2017-09-29 --seed 1 \
        --variant checkpointing_standard_borrows=true \
        --variant "checkpointing_standard_borrows=true checkpointing_standard_yields=true"
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import policies as bench  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_grid as grid  # noqa: E402

from shared.scheduling.model import Plan, PriorityClass, QueuedTask, RunningLease, Snapshot  # noqa: E402
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.metrics import window  # noqa: E402
from shared.simulation.runner import Scenario, simulate_policy  # noqa: E402

CORE, STANDARD = PriorityClass.CORE, PriorityClass.STANDARD
HOLDERS = ("core", "standard, no checkpoints", "standard, checkpoints", "standard filler", "opportunistic", "nobody")


@dataclass
class Tally:
    """What one policy's run showed over the stretches where core work waited past its grace."""

    hours: float = 0.0
    held: Counter = field(default_factory=Counter)  # holder -> GPU-hours
    waiting: Counter = field(default_factory=Counter)  # "tasks" / "GPUs" -> task-hours / GPU-hours
    reasons: Counter = field(default_factory=Counter)  # deferral reason -> task-hours
    actions: Counter = field(default_factory=Counter)  # grants and preemptions made meanwhile
    core_p95_min: float = float("nan")
    standard_p95_min: float = float("nan")  # what yielding costs standard work
    standard_mean_min: float = float("nan")
    preemptions: int = 0


def holder(priority_class: PriorityClass, borrowed_headroom: bool, checkpoints: bool) -> str:
    """Which kind of work holds a lease's (or a grant's) GPUs (`HOLDERS`)."""
    if priority_class != STANDARD:
        return str(priority_class)
    if borrowed_headroom:
        return "standard filler"
    return "standard, checkpoints" if checkpoints else "standard, no checkpoints"


def lease_holder(lease: RunningLease) -> str:
    return holder(lease.priority_class, lease.borrowed_headroom, lease.checkpoints_on_preempt)


def waiting_past_grace(queue: list[QueuedTask], result: Plan, now: float, grace_s: float) -> list[QueuedTask]:
    """Ready core tasks that have waited past their grace and are not granted by this plan."""
    granted = {grant.task_id for grant in result.grants}
    return [task for task in queue if task.priority_class == CORE and task.data_ready and task.options
            and now >= task.submitted_at + grace_s and task.task_id not in granted]


def held_after(snapshot: Snapshot, result: Plan, tasks: dict[str, QueuedTask]) -> Counter:
    """GPUs per holder once the plan's grants and preemptions are applied."""
    held = Counter()
    preempted = {preemption.lease_id for preemption in result.preemptions}
    for lease in snapshot.leases:
        if lease.lease_id not in preempted:
            held[lease_holder(lease)] += lease.gpus
    for grant in result.grants:
        task = tasks[grant.task_id]
        kind = holder(task.priority_class, grant.borrowed_headroom, task.checkpoint_interval_s is not None)
        held[kind] += sum(len(placement.gpu_indices) for placement in grant.placements)
    held["nobody"] = sum(node.gpus for node in snapshot.nodes) - sum(held.values())
    return held


def measure(scenario: Scenario, policy: Policy) -> Tally:
    lo, hi = window(scenario.tasks)
    tally, open_stretch = Tally(), None

    def observed(snapshot, queue, chosen, now):
        nonlocal open_stretch
        result = plan(snapshot, queue, chosen, now)
        if open_stretch is not None:
            started, held, waiting, reasons = open_stretch
            hours = max(0.0, min(now, hi) - max(started, lo)) / 3600
            tally.hours += hours
            for counter, values in ((tally.held, held), (tally.waiting, waiting), (tally.reasons, reasons)):
                counter.update({key: value * hours for key, value in values.items()})
        tasks = list(queue)
        waiting = waiting_past_grace(tasks, result, now, chosen.preempt_after_s)
        open_stretch = None
        if waiting:
            by_id = {task.task_id: task for task in tasks}
            reason_of = dict(zip(result.deferrals.task_ids, result.deferrals.reasons))
            open_stretch = (now, held_after(snapshot, result, by_id),
                            Counter(tasks=len(waiting), GPUs=sum(task.gpus for task in waiting)),
                            Counter(str(reason_of.get(task.task_id, "none")) for task in waiting))
            _count_actions(tally.actions, snapshot, result, by_id)
        return result

    outcome = simulate_policy(scenario, policy, observed, None)
    core, standard = waits_of(outcome, CORE), waits_of(outcome, STANDARD)
    tally.core_p95_min = float(np.percentile(core, 95)) / 60 if core else float("nan")
    tally.standard_p95_min = float(np.percentile(standard, 95)) / 60 if standard else float("nan")
    tally.standard_mean_min = float(np.mean(standard)) / 60 if standard else float("nan")
    tally.preemptions = outcome.recorder.preemptions
    return tally


def waits_of(outcome, priority_class: PriorityClass) -> list[float]:
    """The waits (s) of the tasks of this class that started."""
    waits = outcome.recorder.waits
    return [waits[task.task_id] for task in outcome.tasks
            if task.priority_class == priority_class and task.task_id in waits]


def _count_actions(actions: Counter, snapshot: Snapshot, result: Plan, tasks: dict[str, QueuedTask]) -> None:
    for grant in result.grants:
        task = tasks[grant.task_id]
        kind = holder(task.priority_class, grant.borrowed_headroom, task.checkpoint_interval_s is not None)
        actions["grants to " + kind] += 1
    leases = {lease.lease_id: lease for lease in snapshot.leases}
    for preemption in result.preemptions:
        actions["preempted " + lease_holder(leases[preemption.lease_id])] += 1


def table(names: list[str], tallies: list[Tally]) -> list[str]:
    """A markdown table: one column per policy."""
    def mean(counter: Counter, key: str, tally: Tally) -> str:
        return f"{counter[key] / tally.hours:.1f}" if tally.hours else "-"

    rows = [("core p95 wait over the window, min", [f"{t.core_p95_min:.0f}" for t in tallies]),
            ("standard p95 / mean wait over the window, min", [f"{t.standard_p95_min:.0f} / {t.standard_mean_min:.0f}"
                                                               for t in tallies]),
            ("preemptions over the run", [f"{t.preemptions:,}" for t in tallies]),
            ("hours a ready core task waits past its grace", [f"{t.hours:.1f}" for t in tallies]),
            ("... core tasks waiting then (mean)", [mean(t.waiting, "tasks", t) for t in tallies]),
            ("... their GPUs (mean)", [mean(t.waiting, "GPUs", t) for t in tallies])]
    rows += [(f"... GPUs held by {name} (mean)", [mean(t.held, name, t) for t in tallies]) for name in HOLDERS]
    rows.append(("... GPU-hours standard fillers hold then", [f"{t.held['standard filler']:.0f}" for t in tallies]))
    reasons = sorted({reason for t in tallies for reason in t.reasons})
    rows += [(f"... core tasks deferred `{reason}` (mean)", [mean(t.reasons, reason, t) for t in tallies])
             for reason in reasons]
    actions = sorted({action for t in tallies for action in t.actions})
    rows += [(f"... {action} (count)", [str(t.actions[action]) for t in tallies]) for action in actions]
    lines = ["| | " + " | ".join(f"`{name}`" for name in names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {label} | " + " | ".join(values) + " |" for label, values in rows]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs=4, metavar=("CHECKPOINT", "DELAY", "SIGMA", "MIX"), required=True)
    parser.add_argument("--window", default="2017-09-29", help="a Philly grid window's first day")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variant", action="append", default=[], metavar='"FIELD=VALUE ..."')
    args = parser.parse_args()
    checkpoint, delay, sigma, mix = args.cell
    cell = grid.Cell(float(checkpoint), float(delay), float(sigma), mix)
    preset = POLICIES["cardflow"]
    scenario = bench.grid_scenario(grid.Run(cell, args.window, args.seed, preset))
    policies = {"preset": preset} | {variant: grid.variant(preset, variant.split()) for variant in args.variant}
    tallies = [measure(scenario, policy) for policy in policies.values()]
    print(f"{cell.label}, window {args.window}, seed {args.seed}, {scenario.cluster.capacity} GPUs; time-weighted over "
          "the stretches where a ready core task waits past its grace:\n")
    print("\n".join(table(list(policies), tallies)))


if __name__ == "__main__":
    main()
