"""What could fill the headroom while it idles: one grid unit under the cardflow preset, time-weighted.

Runs the preset on one grid unit (cell, Philly window, synthesis seed; bench/policies_grid.py) and, over
every stretch between two plans inside the measured window (as utilisation counts it) where GPUs stay free while the headroom refuses standard work (a
`headroom` deferral), averages what each kind of work could lend it: the GPUs opportunistic leases hold,
the GPUs of standard leases whose estimate ends within 1, 2 and 4 preemption graces (what
`Policy.standard_borrows_within_graces` lets cover the headroom), the GPUs of ready standard tasks of at
most that runtime, and the GPUs of ready standard tasks that checkpoint and fit the largest free block.
Diagnosis behind docs/BENCHMARKS.md, "Tried or considered": standard work that ends within the grace.

    nice -n 19 .venv/bin/python bench/headroom_idle.py --cell 0.8 0 0.6 core-heavy --window 2017-11-16 --seed 42
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import policies as bench  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_grid as grid  # noqa: E402

from shared.scheduling.model import DeferralReason, Plan, PriorityClass, QueuedTask, Snapshot  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.metrics import window  # noqa: E402
from shared.simulation.runner import simulate_policy  # noqa: E402

GRACES = (1, 2, 4)


def lendable(snapshot: Snapshot, queue: list[QueuedTask], result: Plan, now: float, grace_s: float) -> dict[str, float] | None:
    """What each kind of work holds or asks for at a plan whose free GPUs idle while the headroom refuses
    standard work; None at any other plan."""
    free = sum(len(node.free) for node in snapshot.nodes) - sum(
        len(placement.gpu_indices) for grant in result.grants for placement in grant.placements)
    if free <= 0 or DeferralReason.HEADROOM not in result.deferrals.reasons:
        return None
    standard, opportunistic = PriorityClass.STANDARD, PriorityClass.OPPORTUNISTIC
    ready = [task for task in queue if task.priority_class == standard and task.data_ready and task.options]
    block = min(free, max((len(node.free) for node in snapshot.nodes), default=0))
    values = {"idle GPUs": free,
              "GPUs opportunistic leases hold": sum(lease.gpus for lease in snapshot.leases if lease.priority_class == opportunistic),
              "GPUs of ready standard tasks": sum(task.gpus for task in ready),
              "GPUs of ready checkpointing standard tasks that fit a free block": sum(
                  task.gpus for task in ready if task.checkpoint_interval_s is not None and task.gpus <= block)}
    for graces in GRACES:
        until = now + graces * grace_s
        values[f"GPUs of standard leases ending within {graces} grace(s)"] = sum(
            lease.gpus for lease in snapshot.leases if lease.priority_class == standard and now < lease.estimated_end <= until)
        values[f"GPUs of ready standard tasks of at most {graces} grace(s)"] = sum(
            task.gpus for task in ready if min(option.runtime_s for option in task.options) <= graces * grace_s)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs=4, metavar=("CHECKPOINT", "DELAY", "SIGMA", "MIX"), required=True)
    parser.add_argument("--window", default="2017-11-16", help="a Philly grid window's first day")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    checkpoint, delay, sigma, mix = args.cell
    cell = grid.Cell(float(checkpoint), float(delay), float(sigma), mix)
    policy = POLICIES["cardflow"]
    scenario = bench.grid_scenario(grid.Run(cell, args.window, args.seed, policy))
    weighted, hours, open_stretch = Counter(), 0.0, None
    lo, hi = window(scenario.tasks)

    def observed(snapshot, queue, chosen, now):
        nonlocal hours, open_stretch
        result = plan(snapshot, queue, chosen, now)
        if open_stretch is not None:
            started, values = open_stretch
            inside = max(0.0, min(now, hi) - max(started, lo)) / 3600
            hours += inside
            weighted.update({key: value * inside for key, value in values.items()})
        values = lendable(snapshot, list(queue), result, now, chosen.preempt_after_s)
        open_stretch = None if values is None else (now, values)
        return result

    simulate_policy(scenario, policy, observed, None)
    print(f"{cell.label}, window {args.window}, seed {args.seed}: {hours:.1f} h with GPUs idle while the headroom "
          f"refuses standard work, {weighted['idle GPUs']:.0f} GPU-h idle; time-weighted means then:")
    for key, value in weighted.items():
        print(f"  {key}: {value / hours:.2f}" if hours else f"  {key}: -")


if __name__ == "__main__":
    main()
