"""A cardflow variant against the cardflow preset, paired per grid unit, from the grid's cache.

For each selected unit (cell, Philly window, seed) that both the variant and the preset have cached runs
of, the utilisation difference variant − preset in points; printed pooled (GPU-seconds summed) with a 95%
bootstrap interval over units, the range of single units and how many units ended exactly alike — over
every unit and per class mix. Nothing is simulated: run `bench/policies.py --grid ... --grid-set ...` first.

    .venv/bin/python bench/grid_paired.py --grid-cells sigma=0.3,1.0 --grid-seeds 1 --grid-window-step 6 \
        --grid-window-offset 1 --grid-set checkpointing_standard_borrows=true --code DIGEST[,DIGEST]
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.scheduling.policies import POLICIES  # noqa: E402

import policies_grid as grid  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_windows as windows  # noqa: E402


def paired(units: list[tuple[dict, dict]], resamples: int = grid.RESAMPLES) -> str:
    """'diff points (interval), single units lo to hi, N equal' for (variant, preset) result pairs."""
    def diff(sample: list[tuple[dict, dict]]) -> float:
        return 100 * sum(v["useful_gpu_s"] - p["useful_gpu_s"] for v, p in sample) / sum(p["capacity_gpu_s"] for _, p in sample)
    rng = np.random.default_rng(0)
    draws = [diff([units[i] for i in rng.integers(0, len(units), size=len(units))]) for _ in range(resamples)]
    low, high = np.percentile(draws, [2.5, 97.5])
    singles = [diff([unit]) for unit in units]
    equal = sum(abs(value) < 1e-9 for value in singles)
    return (f"{diff(units):+.2f} points (95% interval {low:+.2f} to {high:+.2f}; single units {min(singles):+.2f} to "
            f"{max(singles):+.2f}; {equal} of {len(units)} units equal)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-cells", nargs="*", default=[])
    parser.add_argument("--grid-seeds", type=int, nargs="*", default=[42, 1])
    parser.add_argument("--windows-from", type=date.fromisoformat, default=date(2017, 9, 25))
    parser.add_argument("--windows-to", type=date.fromisoformat, default=date(2017, 12, 23))
    parser.add_argument("--grid-window-step", type=int, default=1)
    parser.add_argument("--grid-window-offset", type=int, default=0)
    parser.add_argument("--grid-set", nargs="+", required=True, metavar="FIELD=VALUE")
    parser.add_argument("--code", required=True, metavar="DIGEST[,DIGEST]", help="cache digests, first hit wins")
    args = parser.parse_args()
    cells = grid.select_cells(grid.all_cells(), args.grid_cells)
    starts = windows.window_starts(args.windows_from, args.windows_to, 4)[args.grid_window_offset::max(1, args.grid_window_step)]
    preset = POLICIES["cardflow"]
    changed = grid.variant(preset, args.grid_set)
    codes = args.code.split(",")
    by_mix: dict[str, list[tuple[dict, dict]]] = {}
    for run in grid.plan_runs(cells, starts, args.grid_seeds, [changed], openb=False):
        ours = grid.cached_any(run, codes)
        before = grid.cached_any(grid.Run(run.cell, run.workload, run.seed, preset), codes)
        if ours is not None and before is not None:
            by_mix.setdefault(run.cell.class_mix, []).append((ours, before))
    every = [unit for units in by_mix.values() for unit in units]
    if not every:
        raise SystemExit("no unit has both runs cached under these digests")
    print(f"{' '.join(args.grid_set)} − preset, utilisation: {paired(every)}")
    for mix, units in sorted(by_mix.items()):
        print(f"  {mix}: {paired(units)}")


if __name__ == "__main__":
    main()
