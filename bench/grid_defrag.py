"""Consolidation (`Policy.holder_consolidates`) against the cardflow preset, both simulated, paired per grid unit.

Session 22's gap decomposition (bench/grid_gap.py) found the core-heavy cells' idle GPU-time past the headroom mostly
in stretches where every waiting ready task is wider than any node's free GPUs — typically an 8-GPU reservation
holder hours from its start, with 12-14 GPUs free across nodes. Consolidation (shared/scheduling/consolidation.py)
lets that holder take a node whose every lease checkpoints and fits now on the other nodes' free GPUs. Each unit
(cell, Philly window, synthesis seed) runs the preset and the preset with `holder_consolidates` (and
`--consolidate-after` seconds); printed paired per cell and pooled, with 95% bootstrap intervals over units:
bench/grid_paired.py's per-cell table (utilisation difference, core p95 before → after with the ratio's interval,
preemptions, units alike, verdict). Runs are cached (bench/out/grid_defrag/, keyed like the grid's; `--reuse`: digests
of code whose preset decides alike, for the preset's runs).

    nice -n 10 .venv/bin/python bench/grid_defrag.py --grid-cells checkpoint=0.8 mix=core-heavy --grid-seeds 4
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import grid_paired as paired  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies as bench  # noqa: E402
import policies_grid as grid  # noqa: E402
import policies_windows as windows  # noqa: E402

from shared.scheduling.policies import POLICIES  # noqa: E402

CACHE = REPO / "bench" / "out" / "grid_defrag"


def measured(run: grid.Run, codes: Sequence[str], arm: str) -> dict:
    """The grid's numbers for the run (`policies_grid.measure`), from this script's cache under one of `codes` (stored
    under the first); `arm`: "on" (the variant) or "off" (the preset)."""
    for code in codes:
        path = CACHE / f"{run.key(code)}-{arm}.json"
        if path.exists():
            return json.loads(path.read_text())
    result = grid.measure(bench.grid_scenario(run), run.policy)
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / f"{run.key(codes[0])}-{arm}.json").write_text(json.dumps(result))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-cells", nargs="*", default=["checkpoint=0.8", "mix=core-heavy"])
    parser.add_argument("--grid-seeds", type=int, nargs="*", default=[4])
    parser.add_argument("--grid-window-step", type=int, default=6)
    parser.add_argument("--grid-window-offset", type=int, default=1)
    parser.add_argument("--consolidate-after", type=float, default=3600.0, help="Policy.consolidate_after_s")
    parser.add_argument("--reuse", default="", metavar="DIGEST[,DIGEST]", help="the preset's runs may come from these")
    args = parser.parse_args()
    code = grid.code_digest()
    cells = grid.select_cells(grid.all_cells(), args.grid_cells)
    starts = windows.window_starts(date(2017, 9, 25), date(2017, 12, 23), 4)[
        args.grid_window_offset::max(1, args.grid_window_step)]
    preset = POLICIES["cardflow"]
    consolidating = grid.variant(preset, ["holder_consolidates=true", f"consolidate_after_s={args.consolidate_after}"])
    rows: dict[grid.Cell, list[tuple[dict, dict]]] = {}
    for run in grid.plan_runs(cells, starts, args.grid_seeds, [preset], openb=False):
        on = measured(grid.Run(run.cell, run.workload, run.seed, consolidating), [code], "on")
        rows.setdefault(run.cell, []).append((on, measured(run, [code, *filter(None, args.reuse.split(","))], "off")))
        print(f"{run.cell.label} {run.workload} seed {run.seed}: done", file=sys.stderr, flush=True)
    print(f"holder_consolidates=true consolidate_after_s={args.consolidate_after:g} − preset, utilisation: "
          f"{paired.paired(paired.pooled_units(rows))}")
    print("\n".join(paired.per_cell_table(rows)))


if __name__ == "__main__":
    main()
