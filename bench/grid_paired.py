"""A cardflow variant against the cardflow preset, paired per grid unit, from the grid's cache.

For each selected unit (cell, Philly window, seed) that both the variant and the preset have cached runs
of, the utilisation difference variant − preset in points; printed pooled (GPU-seconds summed) with a 95%
bootstrap interval over units, the range of single units and how many units ended exactly alike — over
every unit and per class mix. Nothing is simulated: run `bench/policies.py --grid ... --grid-set ...` first.
`--against FIELD=VALUE ...` compares with that variant of the preset instead of the preset itself.

`--per-cell` adds a markdown table, one row per cell (and pooled): the paired utilisation difference with its
interval, core p95 wait preset → variant with the 95% interval of their ratio (units resampled together),
busy-while-queued, preemptions, unfinished tasks and a verdict — *worse* when the whole utilisation interval
lies below 0 or the whole ratio interval above 1 (or a task is left unfinished), *better* when the reverse
holds and nothing is worse, *alike* when every unit ended exactly alike, else *within noise*.

    .venv/bin/python bench/grid_paired.py --grid-cells sigma=0.3,1.0 --grid-seeds 1 --grid-window-step 6 \
        --grid-window-offset 1 --grid-set checkpointing_standard_borrows=true --code DIGEST[,DIGEST] [--per-cell]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.scheduling.policies import POLICIES  # noqa: E402

import policies_grid as grid  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_windows as windows  # noqa: E402

Pair = tuple[dict, dict]  # (variant, preset) results of one unit


def utilisation_diff(sample: Sequence[Pair]) -> float:
    """Points of utilisation the variant gains over the preset, GPU-seconds summed over the units."""
    return 100 * sum(v["useful_gpu_s"] - p["useful_gpu_s"] for v, p in sample) / sum(p["capacity_gpu_s"] for _, p in sample)


def core_p95_min(results: Sequence[dict]) -> float:
    waits = [wait for result in results for wait in result["core_waits_s"]]
    return float(np.percentile(waits, 95)) / 60 if waits else float("nan")


def core_p95_ratio(sample: Sequence[Pair]) -> float:
    """Pooled core p95 wait, variant ÷ preset (nan when the preset's is 0)."""
    before = core_p95_min([p for _, p in sample])
    return core_p95_min([v for v, _ in sample]) / before if before > 0 else float("nan")


def _draws(units: Sequence[Pair], resamples: int) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(0)
    diffs, ratios = [], []
    for _ in range(resamples):
        sample = [units[i] for i in rng.integers(0, len(units), size=len(units))]
        diffs.append(utilisation_diff(sample))
        ratios.append(core_p95_ratio(sample))
    return diffs, ratios


def _interval(values: Sequence[float]) -> tuple[float, float]:
    finite = [value for value in values if np.isfinite(value)]
    return tuple(np.percentile(finite, [2.5, 97.5])) if finite else (float("nan"), float("nan"))


def paired(units: list[Pair], resamples: int = grid.RESAMPLES) -> str:
    """'diff points (interval), single units lo to hi, N equal' for (variant, preset) result pairs."""
    low, high = _interval(_draws(units, resamples)[0])
    singles = [utilisation_diff([unit]) for unit in units]
    equal = sum(abs(value) < 1e-9 for value in singles)
    return (f"{utilisation_diff(units):+.2f} points (95% interval {low:+.2f} to {high:+.2f}; single units {min(singles):+.2f} to "
            f"{max(singles):+.2f}; {equal} of {len(units)} units equal)")


def alike(unit: Pair) -> bool:
    """The two runs ended exactly alike (same useful GPU-time, waits and preemptions)."""
    ours, theirs = unit
    return all(ours[key] == theirs[key] for key in ("useful_gpu_s", "core_waits_s", "preemptions"))


def cell_verdict(units: Sequence[Pair], diff_interval: tuple[float, float], ratio_interval: tuple[float, float]) -> str:
    """worse / better / alike / within noise (see the module docstring)."""
    unfinished = sum(v["unfinished"] for v, _ in units) > sum(p["unfinished"] for _, p in units)
    worse = unfinished or diff_interval[1] < 0 or ratio_interval[0] > 1
    if worse:
        return "**worse**"
    if diff_interval[0] > 0 or ratio_interval[1] < 1:
        return "better"
    return "alike" if all(alike(unit) for unit in units) else "within noise"


def cell_row(label: str, units: Sequence[Pair], resamples: int) -> str:
    """One markdown row of the per-cell table."""
    diffs, ratios = _draws(units, resamples)
    diff_interval, ratio_interval = _interval(diffs), _interval(ratios)
    ours, theirs = [v for v, _ in units], [p for _, p in units]

    def busy(results: Sequence[dict]) -> float:
        return 100 * sum(r["busy_queued_gpu_s"] for r in results) / max(1.0, sum(r["offered_queued_gpu_s"] for r in results))

    return (f"| {label} | {len(units)} | {utilisation_diff(units):+.2f} ({diff_interval[0]:+.2f} to {diff_interval[1]:+.2f}) | "
            f"{core_p95_min(theirs):.0f} → {core_p95_min(ours):.0f} min (×{ratio_interval[0]:.2f}–{ratio_interval[1]:.2f}) | "
            f"{busy(theirs):.1f}% → {busy(ours):.1f}% | {sum(r['preemptions'] for r in theirs):,} → "
            f"{sum(r['preemptions'] for r in ours):,} | {sum(r['unfinished'] for r in theirs)} / "
            f"{sum(r['unfinished'] for r in ours)} | {sum(map(alike, units))} | {cell_verdict(units, diff_interval, ratio_interval)} |")


def pooled_units(by_cell: dict[grid.Cell, list[Pair]]) -> list[Pair]:
    """Every unit, in one fixed order: the summary line and the table's pooled row resample the same list with the
    same seed, so they print the same interval."""
    return [unit for units in by_cell.values() for unit in units]


def per_cell_table(by_cell: dict[grid.Cell, list[Pair]], resamples: int = grid.RESAMPLES) -> list[str]:
    lines = ["| cell | units | utilisation, points (95% interval) | core p95 before → after (ratio interval) | "
             "busy while queued | preemptions | unfinished before / after | units alike | verdict |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [cell_row(cell.label, units, resamples) for cell, units in sorted(by_cell.items())]
    lines.append(cell_row("**pooled over every cell**", pooled_units(by_cell), resamples))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-cells", nargs="*", default=[])
    parser.add_argument("--grid-seeds", type=int, nargs="*", default=[42, 1])
    parser.add_argument("--windows-from", type=date.fromisoformat, default=date(2017, 9, 25))
    parser.add_argument("--windows-to", type=date.fromisoformat, default=date(2017, 12, 23))
    parser.add_argument("--grid-window-step", type=int, default=1)
    parser.add_argument("--grid-window-offset", type=int, default=0)
    parser.add_argument("--grid-set", nargs="+", required=True, metavar="FIELD=VALUE")
    parser.add_argument("--against", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="compare with this variant of the preset (default: the preset)")
    parser.add_argument("--code", required=True, metavar="DIGEST[,DIGEST]", help="cache digests, first hit wins")
    parser.add_argument("--per-cell", action="store_true", help="also print the per-cell markdown table")
    args = parser.parse_args()
    cells = grid.select_cells(grid.all_cells(), args.grid_cells)
    starts = windows.window_starts(args.windows_from, args.windows_to, 4)[args.grid_window_offset::max(1, args.grid_window_step)]
    preset = grid.variant(POLICIES["cardflow"], args.against)
    changed = grid.variant(preset, args.grid_set)
    codes = args.code.split(",")
    by_mix: dict[str, list[Pair]] = {}
    by_cell: dict[grid.Cell, list[Pair]] = {}
    for run in grid.plan_runs(cells, starts, args.grid_seeds, [changed], openb=False):
        ours = grid.cached_any(run, codes)
        before = grid.cached_any(grid.Run(run.cell, run.workload, run.seed, preset), codes)
        if ours is not None and before is not None:
            by_mix.setdefault(run.cell.class_mix, []).append((ours, before))
            by_cell.setdefault(run.cell, []).append((ours, before))
    every = pooled_units(by_cell)
    if not every:
        raise SystemExit("no unit has both runs cached under these digests")
    against = f" ({' '.join(args.against)})" if args.against else ""
    print(f"{' '.join(args.grid_set)} − preset{against}, utilisation: {paired(every)}")
    for mix, units in sorted(by_mix.items()):
        print(f"  {mix}: {paired(units)}")
    if args.per_cell:
        print("\n".join(["", *per_cell_table(by_cell)]))


if __name__ == "__main__":
    main()
