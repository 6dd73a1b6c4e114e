"""How much of the preset's utilisation gap is idle headroom, per grid cell: the preset re-simulated, time-weighted.

The grid's core-heavy cells lose 1.2–2.6 utilisation points to easy-backfill (docs/BENCHMARKS.md, the grid). This
runs the cardflow preset on every selected grid unit (cell, Philly window, synthesis seed; bench/policies_grid.py)
and, over every stretch between two plans inside the measured window (as utilisation counts it), adds up:

- *refused idle*: the GPUs left free after the plan's grants while the plan refused some ready standard task for the
  headroom (a `headroom` deferral) — every idle GPU of such a stretch, fragments included;
- *idle headroom*: of those, no more than the headroom kept free — per card type the headroom the plan keeps
  (`headroom_gpus`, capped by the core demand present: what core work holds or waits for) minus what opportunistic
  work and standard fillers (`Policy.checkpointing_standard_borrows`) borrow of it — the GPU-time the headroom rule
  itself holds idle while ready standard work waits;
- *headroom kept*: the headroom's size over the whole window, and the core GPUs waiting, both time-weighted.

Printed per cell, beside the preset's and easy-backfill's utilisation from the grid's cache (their difference is the
gap the idle headroom is set against) and idle-while-queued GPU-time (fleet GPU-time minus busy-while-queued), as
points of the fleet's GPU-time. `--write` puts the table between `<!-- headroom-idle:start -->` and
`<!-- headroom-idle:end -->` in docs/BENCHMARKS.md. Each unit's measurement is cached (bench/out/headroom_idle/,
keyed like the grid's runs); the preset's and easy-backfill's grid runs must be cached (`--reuse` digests: code
whose preset decides alike, as `bench/scale.py --digest` shows).

    nice -n 15 .venv/bin/python bench/headroom_idle_grid.py --grid-cells mix=core-heavy,default --grid-seeds 42 1 2 \
        --grid-window-step 6 --grid-window-offset 1 --reuse 625b1af7ee99a8c0,f7e4dae04608fec5 --write
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import policies as bench  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_grid as grid  # noqa: E402
import policies_windows as windows  # noqa: E402

from shared.scheduling.headroom import core_demand, headroom_gpus  # noqa: E402
from shared.scheduling.model import DeferralReason, Plan, PriorityClass, QueuedTask, Snapshot  # noqa: E402
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.metrics import window  # noqa: E402
from shared.simulation.runner import Outcome, Scenario, simulate_policy  # noqa: E402

CACHE = REPO / "bench" / "out" / "headroom_idle"
DOC = REPO / "docs" / "BENCHMARKS.md"
START, END = "<!-- headroom-idle:start -->", "<!-- headroom-idle:end -->"
MEASURES = ("refused_idle_gpu_s", "headroom_idle_gpu_s", "headroom_gpu_s", "core_waiting_gpu_s", "seconds")


def borrowed_after(snapshot: Snapshot, queue: Sequence[QueuedTask], result: Plan) -> dict[str, int]:
    """GPUs per card type that opportunistic work and standard fillers borrow of the headroom once the plan is applied:
    its grants that borrow, and the leases that do and are not preempted."""
    card_of_node = {node.node_id: node.card_type for node in snapshot.nodes}
    borrowed: dict[str, int] = {}
    classes = {task.task_id: task.priority_class for task in queue}
    for grant in result.grants:
        if classes.get(grant.task_id) == PriorityClass.OPPORTUNISTIC or grant.borrowed_headroom:
            taken = sum(len(placement.gpu_indices) for placement in grant.placements)
            borrowed[grant.card_type] = borrowed.get(grant.card_type, 0) + taken
    preempted = {preemption.lease_id for preemption in result.preemptions}
    for lease in snapshot.leases:
        lends = lease.priority_class == PriorityClass.OPPORTUNISTIC or lease.borrowed_headroom  # or a standard filler
        if lends and lease.lease_id not in preempted:
            card_type = card_of_node.get(lease.node_id)
            borrowed[card_type] = borrowed.get(card_type, 0) + lease.gpus
    return borrowed


def headroom_kept(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy) -> dict[str, int]:
    """GPUs per card type the plan keeps as headroom (`headroom_gpus`, capped by the core demand present)."""
    card_of_node = {node.node_id: node.card_type for node in snapshot.nodes}
    total: dict[str, int] = {}
    for node in snapshot.nodes:
        total[node.card_type] = total.get(node.card_type, 0) + node.gpus
    demand = core_demand(snapshot.leases, queue, card_of_node)
    return {card: headroom_gpus(policy, card, gpus, demand.get(card, 0)) for card, gpus in total.items()}


def stretch_values(snapshot: Snapshot, queue: Sequence[QueuedTask], result: Plan, policy: Policy) -> dict[str, float]:
    """GPUs (per second of the stretch the plan opens): idle while the headroom refuses ready standard work, the
    headroom's idle part then, the headroom kept, core GPUs waiting (module docstring)."""
    idle: dict[str, int] = {}
    for node in snapshot.nodes:
        idle[node.card_type] = idle.get(node.card_type, 0) + len(node.free)
    for grant in result.grants:
        idle[grant.card_type] -= sum(len(placement.gpu_indices) for placement in grant.placements)
    borrowed, kept = borrowed_after(snapshot, queue, result), headroom_kept(snapshot, queue, policy)
    refused = DeferralReason.HEADROOM in result.deferrals.reasons
    waiting = sum(task.gpus for task in queue if task.priority_class == PriorityClass.CORE)
    return {"refused_idle_gpu_s": sum(max(0, gpus) for gpus in idle.values()) if refused else 0.0,
            "headroom_idle_gpu_s": sum(min(max(0, idle[card]), max(0, kept[card] - borrowed.get(card, 0)))
                                       for card in kept) if refused else 0.0,
            "headroom_gpu_s": sum(kept.values()), "core_waiting_gpu_s": waiting, "seconds": 1.0}


StretchValues = Callable[[Snapshot, Sequence[QueuedTask], Plan, Policy], Mapping[str, float]]


def time_weighted(scenario: Scenario, policy: Policy, values: StretchValues, keys: Sequence[str]) -> tuple[dict[str, float], Outcome]:
    """Simulate the policy with every plan observed: per key, the sum over the stretches between plans of
    `values(snapshot, queue, plan, policy)[key]` × the stretch's seconds inside the measured window (the last one up
    to the window's end); and the simulation's outcome."""
    lo, hi = window(scenario.tasks)
    sums = dict.fromkeys(keys, 0.0)
    open_stretch: list = []

    def close(now: float) -> None:
        if open_stretch:
            started, opened = open_stretch.pop()
            inside = max(0.0, min(now, hi) - max(started, lo))
            for key, value in opened.items():
                sums[key] += value * inside

    def observed(snapshot: Snapshot, queue: Sequence[QueuedTask], chosen: Policy, now: float) -> Plan:
        result = plan(snapshot, queue, chosen, now)
        close(now)
        open_stretch.append((now, values(snapshot, queue, result, chosen)))
        return result

    outcome = simulate_policy(scenario, policy, observed, None)
    close(hi)
    return sums, outcome


def measure(run: grid.Run) -> dict[str, float]:
    """The unit's time-weighted sums (GPU-seconds; `seconds`: the measured window's length), the preset simulated."""
    return time_weighted(bench.grid_scenario(run), run.policy, stretch_values, MEASURES)[0]


def measured(run: grid.Run, codes: Sequence[str]) -> dict[str, float]:
    """`measure`, from this script's cache where it has the unit under one of `codes` (stored under the first)."""
    for code in codes:
        path = CACHE / f"{run.key(code)}.json"
        if path.exists():
            return json.loads(path.read_text())
    sums = measure(run)
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / f"{run.key(codes[0])}.json").write_text(json.dumps(sums))
    return sums


def points(gpu_s: float, capacity: float) -> str:
    return f"{100 * gpu_s / capacity:.2f}"


def cell_row(label: str, units: Sequence[tuple[dict, dict, dict]]) -> str:
    """One markdown row over (idle measures, preset's grid result, easy-backfill's grid result) per unit."""
    capacity = sum(ours["capacity_gpu_s"] for _, ours, _ in units)
    easy_capacity = sum(easy["capacity_gpu_s"] for _, _, easy in units)

    def total(key: str, index: int) -> float:
        return sum(unit[index][key] for unit in units)

    gap = 100 * total("useful_gpu_s", 1) / capacity - 100 * total("useful_gpu_s", 2) / easy_capacity
    idle_queued = total("offered_queued_gpu_s", 1) - total("busy_queued_gpu_s", 1)
    easy_idle_queued = total("offered_queued_gpu_s", 2) - total("busy_queued_gpu_s", 2)
    seconds = total("seconds", 0)
    return (f"| {label} | {len(units)} | {gap:+.2f} | {points(idle_queued, capacity)} / "
            f"{points(easy_idle_queued, easy_capacity)} | {points(total('refused_idle_gpu_s', 0), capacity)} | "
            f"**{points(total('headroom_idle_gpu_s', 0), capacity)}** | {total('headroom_gpu_s', 0) / seconds:.1f} | "
            f"{total('core_waiting_gpu_s', 0) / seconds:.1f} |")


def table(rows: Mapping[grid.Cell, list[tuple[dict, dict, dict]]], code: str, seeds: Sequence[int]) -> str:
    """The markdown section: heading, how it was made, one row per cell and the pooled rows per class mix."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [START, "### Idle headroom per grid cell: the preset re-simulated (`bench/headroom_idle_grid.py`)", "",
             f"Generated {stamp}; code digest {code}; synthesis seeds {', '.join(map(str, seeds))}, the grid's Philly "
             "windows. Points are shares of the fleet's GPU-time inside the measured window. *Gap*: the preset's "
             "utilisation minus easy-backfill's (the grid's cached runs). *Idle while queued*: GPU-time idle while "
             "ready work waits, preset / easy-backfill. *Refused idle*: GPUs idle in stretches where the headroom "
             "refused a ready standard task. *Idle headroom*: of those, at most the headroom kept minus what "
             "opportunistic work and standard fillers borrowed of it. *Headroom kept* and *core waiting*: GPUs, time-weighted means.", "",
             "| cell | units | gap, points | idle while queued, points (preset / easy) | refused idle, points | "
             "idle headroom, points | headroom kept, GPUs | core waiting, GPUs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [cell_row(cell.label, units) for cell, units in sorted(rows.items())]
    for mix in sorted({cell.class_mix for cell in rows}):
        pooled = [unit for cell, units in rows.items() if cell.class_mix == mix for unit in units]
        lines.append(cell_row(f"**pooled: {mix}**", pooled))
    return "\n".join([*lines, END])


def write_section(text: str) -> None:
    """Replace the section between the markers in docs/BENCHMARKS.md (it must be there)."""
    current = DOC.read_text()
    if START not in current or END not in current:
        raise SystemExit(f"docs/BENCHMARKS.md has no {START} … {END} section to replace")
    head, rest = current.split(START, 1)
    DOC.write_text(head + text + rest.split(END, 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-cells", nargs="*", default=["mix=core-heavy,default"])
    parser.add_argument("--grid-seeds", type=int, nargs="*", default=[42, 1, 2])
    parser.add_argument("--grid-window-step", type=int, default=6)
    parser.add_argument("--grid-window-offset", type=int, default=1)
    parser.add_argument("--reuse", default="", metavar="DIGEST[,DIGEST]",
                        help="the grid's cached preset and easy-backfill runs, and this script's measurements, may "
                             "come from these code digests (for changes that leave the preset's decisions alike)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = parser.parse_args()
    code = grid.code_digest()
    codes = [code, *filter(None, args.reuse.split(","))]
    cells = grid.select_cells(grid.all_cells(), args.grid_cells)
    starts = windows.window_starts(date(2017, 9, 25), date(2017, 12, 23), 4)[
        args.grid_window_offset::max(1, args.grid_window_step)]
    preset, easy = POLICIES["cardflow"], POLICIES["easy-backfill"]
    rows: dict[grid.Cell, list[tuple[dict, dict, dict]]] = {}
    for run in grid.plan_runs(cells, starts, args.grid_seeds, [preset], openb=False):
        ours = grid.cached_any(run, codes)
        theirs = grid.cached_any(grid.Run(run.cell, run.workload, run.seed, easy), codes)
        if ours is None or theirs is None:
            raise SystemExit(f"{run.cell.label} {run.workload} seed {run.seed}: the grid's runs are not cached; "
                             "run bench/policies.py --grid first (or name their digests with --reuse)")
        rows.setdefault(run.cell, []).append((measured(run, codes), ours, theirs))
        print(f"{run.cell.label} {run.workload} seed {run.seed}: done", file=sys.stderr, flush=True)
    text = table(rows, code, args.grid_seeds)
    print(text)
    if args.write:
        write_section(text)


if __name__ == "__main__":
    main()
