"""Where a cardflow variant's utilisation goes on one grid unit: the preset beside variants, decomposed.

Runs one grid unit (cell, Philly window, synthesis seed; bench/policies_grid.py) under the cardflow preset and
each variant (`--variant "FIELD=VALUE ..."`, repeatable) and splits the fleet's GPU-time inside the measured
window into four shares that sum to 100%: useful work, work thrown away (preempted progress and checkpoint
writes), GPUs idle while ready work waits, GPUs idle with nothing ready to run. The idle GPU-hours are further
split by who held the cycle's reservation meanwhile (nobody, a core / standard / opportunistic task of so many
GPUs, or a standard task that had yielded to core work: `victim`), since a reservation's drain is what keeps GPUs
idle under a backlog. For the standard leases preempted by core work (`Policy.checkpointing_standard_yields`): how
many, how many GPUs, how many were wider (their task's GPUs over all its leases) than the core task that took
them, how long their tasks waited to start again, and how many later held the reservation. Diagnosis behind
docs/BENCHMARKS.md, "Tried or considered": why yields lose utilisation where 80% of tasks checkpoint.
`--trace` also prints every yield as it is planned: when, the core task that takes it (GPUs, estimate), the yielding
lease (task, GPUs, node, estimate left), where its task would restart (`HoleTimes.restart_node`, its node left out)
and the cycle's first reservation (task, GPUs, start, nodes); and each restart of a yielded task.

    nice -n 10 .venv/bin/python bench/yield_costs.py --cell 0.8 0 1.0 core-heavy --window 2017-11-16 --seed 1 \
        --variant "checkpointing_standard_yields=true reclaiming_holder_keeps_headroom=true"
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
from shared.scheduling.placement import Fleet  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import NO_HEAVY_LIMIT, POLICIES  # noqa: E402
from shared.scheduling.yield_price import HoleTimes  # noqa: E402
from shared.simulation.metrics import Recorder, window  # noqa: E402
from shared.simulation.runner import Scenario, simulate_policy  # noqa: E402

Segments = list[tuple[float, float, int]]


@dataclass
class Yields:
    """The standard leases core work preempted in one run (`checkpointing_standard_yields`)."""

    count: int = 0
    gpus: int = 0
    wider_than_taker: int = 0  # the victim's task had more GPUs than the core task that took them
    requeue_waits_s: list[float] = field(default_factory=list)  # preemption to the next start of the victim's task
    later_holders: set[str] = field(default_factory=set)  # victims' tasks that held a reservation afterwards


@dataclass
class Shares:
    """One run's GPU-time inside the window, in % of the fleet's, and what yielded."""

    useful: float
    lost: float
    idle_queued: float
    idle_nothing_ready: float
    idle_gpu_hours_by_holder: Counter
    core_p95_min: float
    preemptions: Counter
    yields: Yields


def backlog_intervals(recorder: Recorder, lo: float, hi: float) -> list[tuple[float, float]]:
    """The stretches inside [lo, hi] while at least one ready task was queued."""
    times = np.array([t for t, _, _ in recorder.queue], dtype=float)
    ready = np.array([r for _, _, r in recorder.queue], dtype=float)
    edges = np.unique(np.concatenate([times[(times > lo) & (times < hi)], [lo, hi]]))
    at = np.searchsorted(times, edges[:-1], side="right") - 1
    on = np.where(at >= 0, ready[np.clip(at, 0, None)] > 0, False)
    return [(float(a), float(b)) for a, b, busy in zip(edges[:-1], edges[1:], on) if busy]


def split_by_backlog(segments: Segments, backlog: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, float]:
    """GPU-seconds of the segments inside [lo, hi]: (while ready work waits, otherwise)."""
    starts = np.array([a for a, _ in backlog]), np.array([b for _, b in backlog])
    within, total = 0.0, 0.0
    for start, end, gpus in segments:
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        total += (end - start) * gpus
        first, last = np.searchsorted(starts[1], start, side="right"), np.searchsorted(starts[0], end, side="left")
        if last > first:
            overlap = np.clip(np.minimum(starts[1][first:last], end) - np.maximum(starts[0][first:last], start), 0, None)
            within += float(overlap.sum()) * gpus
    return within, total - within


class Observer:
    """Wraps `plan()`: records each plan's victims, grants, reservation holder and free GPUs."""

    def __init__(self, trace: bool = False, origin: float = 0.0) -> None:
        self.trace, self.origin = trace, origin  # `--trace`: times printed in hours since `origin`
        self.yields = Yields()
        self.preemptions: Counter = Counter()
        self.timeline: list[tuple[float, int, str]] = []  # (time, GPUs free after the plan, reservation holder)
        self._victims: set[str] = set()
        self._requeued_at: dict[str, float] = {}

    def __call__(self, snapshot: Snapshot, queue, policy: Policy, now: float) -> Plan:
        result = plan(snapshot, queue, policy, now)
        tasks = {task.task_id: task for task in queue}
        self._count_preemptions(snapshot, result, tasks, now)
        for grant in result.grants:
            if grant.task_id in self._requeued_at:
                self.yields.requeue_waits_s.append(now - self._requeued_at.pop(grant.task_id))
                if self.trace:
                    nodes = ", ".join(placement.node_id for placement in grant.placements)
                    print(f"    {(now - self.origin) / 3600:8.2f} h restart {grant.task_id} on {nodes}", flush=True)
        preempted = {p.lease_id for p in result.preemptions}
        held = sum(lease.gpus for lease in snapshot.leases if lease.lease_id not in preempted)
        granted = sum(len(placement.gpu_indices) for grant in result.grants for placement in grant.placements)
        free = sum(node.gpus for node in snapshot.nodes) - held - granted
        self.timeline.append((now, free, self._holder(result, tasks)))
        return result

    def _count_preemptions(self, snapshot: Snapshot, result: Plan, tasks: dict[str, QueuedTask], now: float) -> None:
        leases = {lease.lease_id: lease for lease in snapshot.leases}
        widths = Counter()
        for lease in snapshot.leases:
            widths[lease.task_id] += lease.gpus
        for preemption in result.preemptions:
            lease = leases[preemption.lease_id]
            standard = lease.priority_class == PriorityClass.STANDARD and not lease.borrowed_headroom
            self.preemptions["standard, yielding" if standard else str(lease.priority_class)] += 1
            if not standard:
                continue
            taker = tasks.get(preemption.for_task_id)
            self.yields.count += 1
            self.yields.gpus += lease.gpus
            self.yields.wider_than_taker += taker is not None and widths[lease.task_id] > taker.gpus
            self._victims.add(lease.task_id)
            self._requeued_at.setdefault(lease.task_id, now)
            if self.trace:
                line = trace_line(snapshot, result, tasks, lease, taker, now, widths[lease.task_id])
                print(f"    {(now - self.origin) / 3600:8.2f} h {line}", flush=True)

    def _holder(self, result: Plan, tasks: dict[str, QueuedTask]) -> str:
        if not result.reservations:
            return "nobody"
        task = tasks.get(result.reservations[0].task_id)
        if task is None:
            return "unknown"
        if task.task_id in self._victims:
            self.yields.later_holders.add(task.task_id)
            return f"victim, {task.gpus} GPUs"
        return f"{task.priority_class}, {task.gpus} GPUs"


def trace_line(snapshot: Snapshot, result: Plan, tasks: dict[str, QueuedTask], lease: RunningLease,
               taker: QueuedTask | None, now: float, width: int) -> str:
    """One yield (`--trace`): the core task, the yielding lease, where its task restarts, the cycle's reservation."""
    fleet = Fleet(snapshot.nodes, NO_HEAVY_LIMIT, lambda card_type, total: 0)
    rank = fleet.rank_of.get(lease.node_id)
    card_type = fleet.card_of_node(lease.node_id)
    restart = HoleTimes(snapshot.leases, fleet, now).restart_node(card_type, width, rank) if rank is not None else None
    where = "nowhere" if restart is None else f"{fleet.node_ids[restart[0]]} at +{(restart[1] - now) / 3600:.2f} h"
    core = "?" if taker is None else f"{taker.task_id} ({taker.gpus} GPUs, {min(o.runtime_s for o in taker.options) / 3600:.2f} h)"
    reservation = "none"
    if result.reservations:
        held = result.reservations[0]
        holder = tasks.get(held.task_id)
        reservation = (f"{held.task_id} ({holder.gpus if holder else '?'} GPUs, {holder.priority_class if holder else '?'}) "
                       f"at +{(held.start_at - now) / 3600:.2f} h on {', '.join(held.node_ids)}")
    return (f"yield {lease.task_id} ({width} GPUs, {lease.node_id}, "
            f"{max(0.0, lease.estimated_end - now) / 3600:.1f} h left) to {core}; restarts {where}; "
            f"reservation {reservation}")


def measure(scenario: Scenario, policy: Policy, trace: bool = False) -> Shares:
    lo, hi = window(scenario.tasks)
    observer = Observer(trace, lo)
    outcome = simulate_policy(scenario, policy, observer, None)
    recorder, capacity = outcome.recorder, scenario.cluster.capacity
    backlog = backlog_intervals(recorder, lo, hi)
    backlog_s = sum(b - a for a, b in backlog)
    useful_queued, useful_other = split_by_backlog(recorder.useful, backlog, lo, hi)
    lost_queued, lost_other = split_by_backlog(recorder.lost, backlog, lo, hi)
    fleet_s = capacity * (hi - lo)
    idle_by_holder: Counter = Counter()
    for (start, free, holder), (end, _, _) in zip(observer.timeline, observer.timeline[1:] + [(hi, 0, "")]):
        seconds = min(end, hi) - max(start, lo)
        if seconds > 0:
            idle_by_holder[holder] += free * seconds / 3600
    core = [recorder.waits[t.task_id] for t in outcome.tasks
            if t.priority_class == PriorityClass.CORE and t.task_id in recorder.waits]
    return Shares(
        useful=100 * (useful_queued + useful_other) / fleet_s, lost=100 * (lost_queued + lost_other) / fleet_s,
        idle_queued=100 * (capacity * backlog_s - useful_queued - lost_queued) / fleet_s,
        idle_nothing_ready=100 * (capacity * (hi - lo - backlog_s) - useful_other - lost_other) / fleet_s,
        idle_gpu_hours_by_holder=idle_by_holder, core_p95_min=float(np.percentile(core, 95)) / 60 if core else float("nan"),
        preemptions=observer.preemptions, yields=observer.yields)


def report(name: str, shares: Shares) -> list[str]:
    yields = shares.yields
    waits = yields.requeue_waits_s
    holders = ", ".join(f"{holder} {hours:.0f}" for holder, hours in shares.idle_gpu_hours_by_holder.most_common(5))
    return [f"{name}: useful {shares.useful:.2f}%, thrown away {shares.lost:.2f}%, idle while ready work waits "
            f"{shares.idle_queued:.2f}%, idle with nothing ready {shares.idle_nothing_ready:.2f}%; core p95 "
            f"{shares.core_p95_min:.0f} min; preemptions {dict(shares.preemptions)}",
            f"    idle GPU-hours by reservation holder: {holders}",
            f"    yielding standard leases: {yields.count} ({yields.gpus} GPUs), {yields.wider_than_taker} wider than "
            f"the core task taking them; requeue wait mean {np.mean(waits) / 3600 if waits else 0:.1f} h; "
            f"{len(yields.later_holders)} of their tasks held the reservation later"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", nargs=4, metavar=("CHECKPOINT", "DELAY", "SIGMA", "MIX"), required=True)
    parser.add_argument("--window", nargs="+", default=["2017-09-29"], help="Philly grid windows' first days")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variant", action="append", default=[], metavar='"FIELD=VALUE ..."')
    parser.add_argument("--trace", action="store_true", help="print every yield and restart as it is planned")
    args = parser.parse_args()
    checkpoint, delay, sigma, mix = args.cell
    cell = grid.Cell(float(checkpoint), float(delay), float(sigma), mix)
    preset = POLICIES["cardflow"]
    policies = {"preset": preset} | {variant: grid.variant(preset, variant.split()) for variant in args.variant}
    for start in args.window:
        scenario = bench.grid_scenario(grid.Run(cell, start, args.seed, preset))
        print(f"{cell.label}, window {start}, seed {args.seed}, {scenario.cluster.capacity} GPUs", flush=True)
        for name, policy in policies.items():
            if args.trace:
                print(f"  {name}:", flush=True)
            print("\n".join("  " + line for line in report(name, measure(scenario, policy, args.trace))), flush=True)


if __name__ == "__main__":
    main()
