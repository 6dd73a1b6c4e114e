"""How much utilisation node boundaries cost: each policy on the grid's fleet of 8-GPU nodes and on
a fragmentation-free pool of the same GPUs (one node holding them all).

Issue 10 asks to "measure the gap to a fragmentation-free pool EASY and close it". On a pool every
task fits wherever the free GPU count allows, so the difference between a policy's utilisation on
the pool and on 8-GPU nodes is what packing (which node, which GPUs) and node-shaped reservations
cost it. If cardflow loses more to node boundaries than easy-backfill does, part of its utilisation
gap is packing, not the policy's order, headroom or preemption.

The workloads are the grid's (`bench/policies.py --grid`: Philly 4-day windows synthesized with a
cell's settings); the 8-GPU runs come from the grid cache where present. Results are cached like
the grid's (`bench/out/grid`, workload "pool:<window>" for the pool). Run (about 10 minutes on 2 cores):

    nice -n 19 .venv/bin/python bench/fragmentation.py --jobs 2 --write-docs

`--reuse DIGEST[,DIGEST]` lets the 8-GPU runs come from cached runs of earlier code shown to decide
the same (as `bench/policies.py --grid-code`).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import policies as bench_policies  # noqa: E402  (bench/ is on sys.path)
import policies_grid as grid  # noqa: E402
import policies_windows as windows  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.cluster import Cluster, ClusterNode  # noqa: E402
from shared.simulation.runner import Scenario  # noqa: E402

POOL_PREFIX = "pool:"
DOC = REPO / "docs" / "BENCHMARKS.md"
START, END = "<!-- fragmentation:start -->", "<!-- fragmentation:end -->"
DEFAULT_CELLS = ["checkpoint=0,0.8", "delay=0", "sigma=0.6"]
WINDOWS_FROM, WINDOWS_TO = date(2017, 9, 25), date(2017, 12, 23)  # bench/policies.py's defaults: the grid's windows


def pooled_cluster(cluster: Cluster) -> Cluster:
    """The same GPUs per card type, each card type's on one node: nothing is ever split by a node."""
    nodes = tuple(ClusterNode(f"pool-{card}", card, gpus) for card, gpus in cluster.gpus_by_card().items())
    return Cluster(nodes, f"one pool per card type ({cluster.description})")


def scenario_of(run: grid.Run) -> Scenario:
    """The grid's scenario of the run's window; for a "pool:" workload, on the pooled fleet."""
    if run.workload.startswith(POOL_PREFIX):
        scenario = bench_policies.grid_scenario(replace(run, workload=run.workload.removeprefix(POOL_PREFIX)))
        return replace(scenario, cluster=pooled_cluster(scenario.cluster))
    return bench_policies.grid_scenario(run)


def results_of(runs: list[grid.Run], reuse: list[str], jobs: int, console: Console) -> dict[grid.Run, dict]:
    """Every run: the 8-GPU ones from the cache under the current code or `reuse`, the rest simulated."""
    found = {run: hit for run in runs if not run.workload.startswith(POOL_PREFIX)
             and (hit := grid.cached_any(run, [grid.code_digest(), *reuse])) is not None}  # fmt: skip
    missing = [run for run in runs if run not in found]
    return {**found, **grid.run_grid(missing, scenario_of, jobs, console)}


def _on_fleet(results: dict[grid.Run, dict], cells: list[grid.Cell], pool: bool) -> dict[str, float] | None:
    """`grid.pooled` over every unit of `cells` on the nodes or on the pool (None without units)."""
    units = grid.units_by_cell({r: v for r, v in results.items() if r.cell in cells},
                               lambda w: w.startswith(POOL_PREFIX) == pool)  # fmt: skip
    every = [unit for cell in cells for unit in units.get(cell, [])]
    return grid.pooled(every) if every else None


def rows(results: dict[grid.Run, dict], cells: list[grid.Cell]) -> list[list[str]]:
    """Per cell, then over every cell: utilisation and busy-while-queued of both policies on nodes
    and on the pool."""
    out = []
    for label, group in [*((cell.label, [cell]) for cell in cells), ("**every cell**", cells)]:
        nodes, pool = _on_fleet(results, group, False), _on_fleet(results, group, True)
        if nodes is None or pool is None:
            continue
        cost = {name: 100 * (pool[f"{name}.utilisation"] - nodes[f"{name}.utilisation"]) for name in grid.COMPARED}
        out.append([
            label,
            f"{100 * nodes['cardflow.utilisation']:.2f}% / {100 * nodes['easy-backfill.utilisation']:.2f}%",
            f"{100 * pool['cardflow.utilisation']:.2f}% / {100 * pool['easy-backfill.utilisation']:.2f}%",
            f"{cost['cardflow']:+.2f} / {cost['easy-backfill']:+.2f}",
            f"{100 * nodes['utilisation_diff']:+.2f} → {100 * pool['utilisation_diff']:+.2f}",
            f"{100 * nodes['cardflow.busy_when_queued']:.1f}% → {100 * pool['cardflow.busy_when_queued']:.1f}%",
            f"{nodes['core_p95_ratio']:.2f} → {pool['core_p95_ratio']:.2f}",
        ])  # fmt: skip
    return out


HEADER = ["cell", "utilisation on 8-GPU nodes, cardflow / easy", "on one pool, cardflow / easy",
          "what node boundaries cost, points (cardflow / easy)", "cardflow − easy, points: nodes → pool",
          "cardflow busy while queued: nodes → pool", "core p95 ratio: nodes → pool"]


def summary(results: dict[grid.Run, dict], cells: list[grid.Cell]) -> str:
    """One sentence over every cell, from the numbers."""
    nodes, pool = _on_fleet(results, cells, False), _on_fleet(results, cells, True)
    if nodes is None or pool is None:
        return ""
    cost = {name: 100 * (pool[f"{name}.utilisation"] - nodes[f"{name}.utilisation"]) for name in grid.COMPARED}
    return (f"Over every cell: node boundaries cost cardflow {cost['cardflow']:.2f} points of utilisation and "
            f"easy-backfill {cost['easy-backfill']:.2f}; cardflow's difference to easy-backfill is "
            f"{100 * nodes['utilisation_diff']:+.2f} points on 8-GPU nodes and {100 * pool['utilisation_diff']:+.2f} "
            f"on the pool; busy while ready work waits {100 * nodes['cardflow.busy_when_queued']:.1f}% → "
            f"{100 * pool['cardflow.busy_when_queued']:.1f}% for cardflow "
            f"({100 * nodes['easy-backfill.busy_when_queued']:.1f}% → {100 * pool['easy-backfill.busy_when_queued']:.1f}%"
            " for easy-backfill).")


def write_docs(lines: list[list[str]], starts: list[date], seeds: list[int], command: str, said: str) -> None:
    table = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * (len(HEADER) - 1),
             *["| " + " | ".join(line) + " |" for line in lines]]
    section = "\n".join([
        START,
        "## Node boundaries: each policy on 8-GPU nodes and on a fragmentation-free pool (`bench/fragmentation.py`)",
        "",
        f"The grid's workloads (Philly 4-day windows from {', '.join(str(s) for s in starts)}; synthesis seeds "
        f"{', '.join(str(s) for s in seeds)}), each on the grid's fleet of 8-GPU nodes and on one pool of the same "
        "GPUs (a single node holding them all: every task fits wherever the free GPU count allows). Pooled over "
        "windows and seeds. A policy's \"cost of node boundaries\" is its utilisation on the pool minus on nodes. "
        f"Reproduce: `{command}`.",
        "",
        *table,
        "",
        said,
        "",
        END,
    ])
    text = DOC.read_text()
    if START in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S)
    else:
        marker = "### Tried or considered, and why not (yet)"
        text = text.replace(marker, section + "\n\n" + marker, 1)
    DOC.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="*", default=DEFAULT_CELLS, help="grid cell filters (as --grid-cells)")
    parser.add_argument("--seeds", nargs="*", type=int, default=[42, 1])
    parser.add_argument("--window-step", type=int, default=6)
    parser.add_argument("--window-offset", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--reuse", default="", help="code digests whose cached 8-GPU runs decide the same")
    parser.add_argument("--write-docs", action="store_true", help="write the section of docs/BENCHMARKS.md")
    args = parser.parse_args()
    console = Console()
    cells = grid.select_cells(grid.all_cells(), args.cells)
    starts = windows.window_starts(WINDOWS_FROM, WINDOWS_TO, 4)[args.window_offset::max(1, args.window_step)]
    policies = [POLICIES[name] for name in grid.COMPARED]
    runs = grid.plan_runs(cells, starts, args.seeds, policies, openb=False)
    runs += [replace(run, workload=POOL_PREFIX + run.workload) for run in runs]
    results = results_of(runs, [d for d in args.reuse.split(",") if d], args.jobs, console)
    lines = rows(results, cells)
    table = Table(*HEADER, title="node boundaries: 8-GPU nodes vs one pool")
    for line in lines:
        table.add_row(*line)
    console.print(table)
    if args.write_docs:
        command = "nice -n 19 .venv/bin/python bench/fragmentation.py " + " ".join(sys.argv[1:])
        write_docs(lines, starts, args.seeds, command, summary(results, cells))
        console.print(f"wrote the section to {DOC.relative_to(REPO)}")


if __name__ == "__main__":
    main()
