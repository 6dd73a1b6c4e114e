"""The longest core waits of one grid cell per Philly window: the cardflow preset beside a variant.

Simulates each window of the cell again (not cached) and prints, per window and policy, the core p95 wait
and the longest core waits with their GPUs — where a pooled core p95 comes from.

    nice -n 19 .venv/bin/python bench/grid_core_waits.py --cell 0.5 0 0.3 core-heavy --seed 1 \
        --windows 2017-09-29 2017-10-23 2017-11-16 2017-12-10 --grid-set checkpointing_standard_borrows=true
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.scheduling.model import PriorityClass  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.runner import simulate_policy  # noqa: E402

import policies as bench  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_grid as grid  # noqa: E402

LONGEST = 6


def core_waits(scenario, policy) -> list[tuple[float, int]]:
    """(wait s, GPUs) of every core task that started, longest first."""
    outcome = simulate_policy(scenario, policy, None, None)
    waits = outcome.recorder.waits
    return sorted(((waits[task.task_id], task.gpus) for task in outcome.tasks
                   if task.priority_class == PriorityClass.CORE and task.task_id in waits), reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs=4, required=True, metavar=("CHECKPOINT", "DELAY", "SIGMA", "MIX"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--windows", nargs="+", required=True, metavar="YYYY-MM-DD")
    parser.add_argument("--grid-set", nargs="+", required=True, metavar="FIELD=VALUE")
    args = parser.parse_args()
    checkpoint, delay, sigma, mix = args.cell
    cell = grid.Cell(float(checkpoint), float(delay), float(sigma), mix)
    preset = POLICIES["cardflow"]
    policies = {"preset": preset, " ".join(args.grid_set): grid.variant(preset, args.grid_set)}
    for window in args.windows:
        scenario = bench.grid_scenario(grid.Run(cell, window, args.seed, preset))
        for name, policy in policies.items():
            waits = core_waits(scenario, policy)
            p95 = np.percentile([wait for wait, _ in waits], 95) / 60 if waits else float("nan")
            longest = ", ".join(f"{wait / 60:.0f} min ({gpus} GPU)" for wait, gpus in waits[:LONGEST])
            print(f"{window} {name}: core p95 {p95:.0f} min over {len(waits)} core tasks "
                  f"({scenario.cluster.capacity} GPUs); longest {longest}")


if __name__ == "__main__":
    main()
