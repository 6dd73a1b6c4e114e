"""Where a grid unit's utilisation goes, cardflow beside easy-backfill: the gap decomposed, time-weighted.

Both policies are simulated on each selected grid unit (cell, Philly window, synthesis seed; bench/policies_grid.py)
with every plan observed. The fleet's GPU-time inside the measured window (as utilisation counts it) is split into:

- *useful*: work that counts (the simulator's `useful`, the utilisation itself);
- *lost*: progress preemption (or a quota cut) threw away (the simulator's `lost`);
- *held for data*: GPUs a readiness-blind policy holds while the task's data is not there (the simulator's `idle`);
- *idle*: the rest, from the plans: the GPUs left free after each plan's grants, over the stretch until the next
  plan, split by what kept them free (in this order, each GPU counted once):
  - *nothing ready waits*: no ready task was left waiting by the plan;
  - *preemption hold*: free GPUs on the nodes of the plan's preemption victims (held for the preempting task until
    the victims have checkpointed);
  - *reservation drain*: free GPUs on the nodes of the plan's reservation;
  - *headroom*: with a `headroom` deferral, at most the headroom kept (capped by the core demand) less what
    opportunistic work and standard fillers borrow of it, per card type;
  - *fragmentation*: free GPUs of a card type whose total could hold a waiting ready task that may run there, though
    no node could (a fragmentation-free pool would start it);
  - *too narrow*: the rest — every waiting ready task is wider than the card type's free GPUs;
  - *unplanned*: what the stretches miss (GPUs freed while nothing was planned, e.g. with an empty queue): the
    window's GPU-time less all of the above.

Printed per cell and pooled, as points of the fleet's GPU-time, cardflow / easy-backfill and their difference;
each unit's measurement is cached (bench/out/grid_gap/, keyed like the grid's runs by the code digest).

    nice -n 10 .venv/bin/python bench/grid_gap.py --grid-cells checkpoint=0.8 mix=core-heavy --grid-seeds 42
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import headroom_idle_grid as idle_grid  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies as bench  # noqa: E402
import policies_grid as grid  # noqa: E402
import policies_windows as windows  # noqa: E402

from shared.scheduling.model import DeferralReason, Plan, QueuedTask, Snapshot  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.scheduling.policy_knobs import Policy  # noqa: E402
from shared.simulation.metrics import _gpu_seconds, window  # noqa: E402

CACHE = REPO / "bench" / "out" / "grid_gap"
IDLE = ("nothing ready waits", "preemption hold", "reservation drain", "headroom", "fragmentation", "too narrow")
PARTS = ("useful", "lost", "held for data", *IDLE, "unplanned")
# not startable whatever the fleet: readiness and quota
READINESS = {DeferralReason.DATA_NOT_READY, DeferralReason.UNMATCHED, DeferralReason.NOT_APPROVED,
             DeferralReason.QUOTA_EXHAUSTED, DeferralReason.QUOTA_EXPIRES, DeferralReason.QUOTA_NOT_YET_VALID,
             DeferralReason.NO_QUOTA_ACCOUNT}


def _free_by_node(snapshot: Snapshot, result: Plan) -> dict[str, int]:
    """Free GPUs per node after the plan's grants."""
    free = {node.node_id: len(node.free) for node in snapshot.nodes}
    for grant in result.grants:
        for placement in grant.placements:
            free[placement.node_id] -= len(placement.gpu_indices)
    return free


def _waiting_ready(queue: Sequence[QueuedTask], result: Plan) -> list[QueuedTask]:
    """The tasks the plan left waiting for a reason other than readiness or quota."""
    waiting = {task_id for task_id, reason in zip(result.deferrals.task_ids, result.deferrals.reasons)
               if reason not in READINESS}
    return [task for task in queue if task.task_id in waiting]


def idle_parts(snapshot: Snapshot, queue: Sequence[QueuedTask], result: Plan, policy: Policy) -> dict[str, float]:
    """The free GPUs after the plan, split by what kept them free (module docstring)."""
    card_of_node = {node.node_id: node.card_type for node in snapshot.nodes}
    free = _free_by_node(snapshot, result)
    parts = dict.fromkeys(IDLE, 0.0)
    waiting = _waiting_ready(queue, result)
    if not waiting:
        parts["nothing ready waits"] = float(sum(max(0, gpus) for gpus in free.values()))
        return parts
    leases = {lease.lease_id: lease for lease in snapshot.leases}
    for name, nodes in (("preemption hold", {leases[p.lease_id].node_id for p in result.preemptions if p.lease_id in leases}),
                        ("reservation drain", {node for r in result.reservations for node in r.node_ids})):
        for node_id in nodes:
            parts[name] += max(0, free.get(node_id, 0))
            free[node_id] = 0
    by_card: dict[str, list[int]] = {}
    for node_id, gpus in free.items():
        if gpus > 0:
            by_card.setdefault(card_of_node[node_id], []).append(gpus)
    left = {}
    if DeferralReason.HEADROOM in result.deferrals.reasons:
        borrowed = idle_grid.borrowed_after(snapshot, queue, result)
        left = {card: max(0, kept - borrowed.get(card, 0)) for card, kept in idle_grid.headroom_kept(snapshot, queue, policy).items()}
    for card, gpus in by_card.items():
        idle = sum(gpus)
        held = min(idle, left.get(card, 0))
        parts["headroom"] += held
        idle -= held
        widths = [task.gpus for task in waiting if any(option.card_type == card for option in task.options)]
        if widths and min(widths) <= idle and max(gpus) < min(widths):
            parts["fragmentation"] += idle
        else:
            parts["too narrow"] += idle
    return parts


def measure(run: grid.Run) -> dict[str, float]:
    """GPU-seconds inside the unit's window per part (PARTS), and the capacity, the policy simulated."""
    scenario = bench.grid_scenario(run)
    sums, outcome = idle_grid.time_weighted(scenario, run.policy, idle_parts, IDLE)
    lo, hi = window(scenario.tasks)
    recorder = outcome.recorder
    capacity = scenario.cluster.capacity * (hi - lo)
    sums["useful"] = _gpu_seconds(recorder.useful, lo, hi)
    sums["lost"] = _gpu_seconds(recorder.lost, lo, hi)
    sums["held for data"] = _gpu_seconds(recorder.idle, lo, hi)
    sums["unplanned"] = capacity - sum(sums[part] for part in PARTS if part != "unplanned")
    sums["capacity"] = capacity
    return sums


def measured(run: grid.Run, code: str) -> dict[str, float]:
    path = CACHE / f"{run.key(code)}.json"
    if path.exists():
        return json.loads(path.read_text())
    sums = measure(run)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sums))
    return sums


def row(label: str, units: Sequence[tuple[dict, dict]]) -> str:
    """One markdown row: per part, points cardflow / easy (difference)."""
    ours = sum(unit[0]["capacity"] for unit in units)
    theirs = sum(unit[1]["capacity"] for unit in units)
    cells = []
    for part in PARTS:
        a = 100 * sum(unit[0][part] for unit in units) / ours
        b = 100 * sum(unit[1][part] for unit in units) / theirs
        cells.append(f"{a:.2f} / {b:.2f} ({a - b:+.2f})")
    return f"| {label} | {len(units)} | " + " | ".join(cells) + " |"


def selection_arguments(parser: argparse.ArgumentParser, cells: Sequence[str], seeds: Sequence[int]) -> None:
    """The grid units to measure (cells, seeds, the grid's windows) and the cardflow variant, as command-line options."""
    parser.add_argument("--grid-cells", nargs="*", default=list(cells))
    parser.add_argument("--grid-seeds", type=int, nargs="*", default=list(seeds))
    parser.add_argument("--grid-window-step", type=int, default=6)
    parser.add_argument("--grid-window-offset", type=int, default=1)
    parser.add_argument("--grid-set", nargs="*", default=[], metavar="FIELD=VALUE", help="a cardflow variant")


def paired_runs(args: argparse.Namespace) -> Iterator[tuple[grid.Run, grid.Run]]:
    """Per selected unit (`selection_arguments`), cardflow's (or the variant's) run and easy-backfill's."""
    cells = grid.select_cells(grid.all_cells(), args.grid_cells)
    starts = windows.window_starts(date(2017, 9, 25), date(2017, 12, 23), 4)[
        args.grid_window_offset::max(1, args.grid_window_step)]
    ours = grid.variant(POLICIES["cardflow"], args.grid_set) if args.grid_set else POLICIES["cardflow"]
    for run in grid.plan_runs(cells, starts, args.grid_seeds, [ours], openb=False):
        yield run, grid.Run(run.cell, run.workload, run.seed, POLICIES["easy-backfill"])
        print(f"{run.cell.label} {run.workload} seed {run.seed}: done", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    selection_arguments(parser, ["checkpoint=0.8", "mix=core-heavy"], [42])
    args = parser.parse_args()
    code = grid.code_digest()
    rows: dict[grid.Cell, list[tuple[dict, dict]]] = {}
    for run, easy_run in paired_runs(args):
        rows.setdefault(run.cell, []).append((measured(run, code), measured(easy_run, code)))
    print("| cell | units | " + " | ".join(PARTS) + " |")
    print("|---|---:|" + "---:|" * len(PARTS))
    for cell, units in sorted(rows.items()):
        print(row(cell.label, units))
    print(row("**pooled**", [unit for units in rows.values() for unit in units]))


if __name__ == "__main__":
    main()
