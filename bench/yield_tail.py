"""Which yields of standard work a core p95 gain needs: every standard lease preempted for core work, accounted.

For each selected grid unit (cell, Philly window, synthesis seed) three runs on the same scenario: easy-backfill
(the goal: core p95 ≤ `--goal-share` × its pooled p95 per cell), the cardflow preset, and a yielding arm (the preset
with `--arm` settings, default `checkpointing_standard_yields=true`) with every plan observed. Each preemption of a
standard lease that did not borrow the headroom in the yielding arm is a *yield* (fillers, which the preset takes
too, are counted apart). Per cell and pooled it prints:

- yields, the core tasks they served and yields per served task; the victims' GPUs against the preemptors' (GPUs a
  yield frees beyond what the core task takes);
- what the yields cost: the victims' restart wait (each requeued task's GPUs × the time from its yield to its next
  grant) and the work they lost (their checkpoint writes), as points of the fleet's GPU-time in the window;
- each yield by how long its core task waited *under the preset* (the same task, no yields): under an hour (it would
  have started soon anyway), up to the goal's wait, or past it (a task the p95 goal needs started sooner); and by
  how long it had waited when it took the yield.

    nice -n 19 .venv/bin/python bench/yield_tail.py --cells checkpoint=0.8 mix=core-heavy --seeds 1 \
        --windows 2017-09-29 2017-10-23 2017-11-16 2017-12-10
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.scheduling.model import Plan, PriorityClass, QueuedTask, Snapshot  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.scheduling.policy_knobs import Policy  # noqa: E402
from shared.simulation.metrics import window  # noqa: E402
from shared.simulation.runner import Scenario, simulate_policy  # noqa: E402

import policies as bench  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_grid as grid  # noqa: E402

HOUR = 3600.0
SOON_S = HOUR  # a core task the preset starts within this would have started soon anyway


@dataclass(frozen=True, slots=True)
class Yield:
    """One standard lease preempted for a core task."""

    at: float
    victim_task: str
    victim_gpus: int  # the lease's GPUs
    lost_gpu_h: float
    preemptor: str
    preemptor_gpus: int
    waited_s: float  # the preemptor's wait since its submission when it took the yield


@dataclass(slots=True)
class YieldLog:
    """The yields of one run (standard leases that did not borrow the headroom), the fillers preempted, and each
    yielding victim's restart wait (GPU-seconds, its GPUs × yield to next grant)."""

    yields: list[Yield] = field(default_factory=list)
    fillers: int = 0
    restart_wait_gpu_s: float = 0.0
    unrestarted: int = 0  # victims not granted again before the run ended
    _pending: dict[str, tuple[float, int]] = field(default_factory=dict)  # victim task -> (yielded at, GPUs)

    def observe(self, snapshot: Snapshot, queue: Sequence[QueuedTask], result: Plan, now: float) -> None:
        """Record the plan's standard victims, and the grants that restart earlier ones."""
        for grant in result.grants:
            pending = self._pending.pop(grant.task_id, None)
            if pending is not None:
                self.restart_wait_gpu_s += (now - pending[0]) * pending[1]
        if not result.preemptions:
            return
        leases = {lease.lease_id: lease for lease in snapshot.leases}
        tasks = {task.task_id: task for task in queue}
        for preemption in result.preemptions:
            lease = leases[preemption.lease_id]
            if lease.priority_class != PriorityClass.STANDARD:
                continue
            if lease.borrowed_headroom:  # a filler: the preset takes those too
                self.fillers += 1
                continue
            task = tasks[preemption.for_task_id]
            self.yields.append(Yield(now, lease.task_id, lease.gpus, preemption.lost_gpu_hours, task.task_id,
                                     task.gpus, now - task.submitted_at))
            self._pending[lease.task_id] = (now, self._pending.get(lease.task_id, (now, 0))[1] + lease.gpus)

    def close(self, end: float) -> None:
        """Victims never restarted wait until `end` (the run's last plan)."""
        for yielded_at, gpus in self._pending.values():
            self.restart_wait_gpu_s += (end - yielded_at) * gpus
            self.unrestarted += 1
        self._pending.clear()


@dataclass(slots=True)
class Unit:
    """One unit's three runs, as far as this script needs them."""

    capacity_gpu_s: float
    easy_waits: dict[str, float]
    preset_waits: dict[str, float]
    arm_waits: dict[str, float]
    log: YieldLog


def core_waits(scenario: Scenario, outcome) -> dict[str, float]:
    core = {task.task_id for task in scenario.tasks if task.priority_class == PriorityClass.CORE}
    return {task_id: wait for task_id, wait in outcome.recorder.waits.items() if task_id in core}


def run_unit(scenario: Scenario, arm: Policy) -> Unit:
    log, last = YieldLog(), [0.0]

    def observed(snapshot: Snapshot, queue: Sequence[QueuedTask], chosen: Policy, now: float) -> Plan:
        result = plan(snapshot, queue, chosen, now)
        log.observe(snapshot, queue, result, now)
        last[0] = now
        return result

    easy = simulate_policy(scenario, POLICIES["easy-backfill"])
    preset = simulate_policy(scenario, POLICIES["cardflow"])
    yielding = simulate_policy(scenario, arm, observed)
    log.close(last[0])
    lo, hi = window(scenario.tasks)
    return Unit(scenario.cluster.capacity * (hi - lo), core_waits(scenario, easy), core_waits(scenario, preset),
                core_waits(scenario, yielding), log)


def p95(waits: Sequence[dict[str, float]]) -> float:
    values = [wait for unit in waits for wait in unit.values()]
    return float(np.percentile(values, 95)) if values else float("nan")


def summary(label: str, units: Sequence[Unit], goal_share: float) -> str:
    """One markdown row (columns: ROW_HEADER)."""
    goal_s = goal_share * p95([unit.easy_waits for unit in units])
    capacity = sum(unit.capacity_gpu_s for unit in units)
    yields = [(y, unit) for unit in units for y in unit.log.yields]
    served = {(id(unit), y.preemptor) for y, unit in yields}
    buckets = [0, 0, 0]
    for y, unit in yields:
        before = unit.preset_waits.get(y.preemptor, float("inf"))
        buckets[0 if before < SOON_S else 1 if before < goal_s else 2] += 1
    waited = [y.waited_s / 60 for y, _ in yields]
    restart = sum(unit.log.restart_wait_gpu_s for unit in units)
    lost = sum(y.lost_gpu_h for y, _ in yields) * HOUR
    excess = sum(max(0, y.victim_gpus - y.preemptor_gpus) for y, _ in yields)
    cells = [label, f"{p95([u.preset_waits for u in units]) / 60:.0f} → {p95([u.arm_waits for u in units]) / 60:.0f}"
             f" (goal {goal_s / 60:.0f})", str(len(yields)), str(sum(unit.log.fillers for unit in units)),
             str(len(served)),
             f"{len(yields) / len(served):.2f}" if served else "–",
             f"{np.mean([y.victim_gpus for y, _ in yields]):.1f} / {np.mean([y.preemptor_gpus for y, _ in yields]):.1f}"
             if yields else "–", str(excess),
             f"{100 * restart / capacity:.2f}", f"{100 * lost / capacity:.3f}",
             " / ".join(str(count) for count in buckets),
             f"{np.percentile(waited, 50):.0f} / {np.percentile(waited, 90):.0f}" if waited else "–"]
    return "| " + " | ".join(cells) + " |"


ROW_HEADER = ("cell", "core p95 preset → arm, min", "yields", "fillers preempted too", "core tasks served",
              "yields per served task", "GPUs per yield: victim / core task", "GPUs freed beyond the core task's",
              "victims' restart wait, points", "lost work, points",
              "yields by the core task's wait under the preset: < 1 h / to the goal / past it",
              "core task's wait at the yield, min: median / p90")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="*", default=[], metavar="FIELD=V1,V2")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--windows", nargs="+", required=True, metavar="YYYY-MM-DD")
    parser.add_argument("--arm", nargs="*", default=["checkpointing_standard_yields=true"], metavar="FIELD=VALUE")
    parser.add_argument("--goal-share", type=float, default=0.5)
    args = parser.parse_args()
    arm = grid.variant(POLICIES["cardflow"], args.arm)
    by_cell: dict[str, list[Unit]] = defaultdict(list)
    for cell in grid.select_cells(grid.all_cells(), args.cells):
        for workload in args.windows:
            for seed in args.seeds:
                scenario = bench.grid_scenario(grid.Run(cell, workload, seed, POLICIES["cardflow"]))
                by_cell[cell.label].append(run_unit(scenario, arm))
        print(f"{cell.label}: done", file=sys.stderr, flush=True)
    print(f"arm: {' '.join(args.arm)}")
    print("| " + " | ".join(ROW_HEADER) + " |")
    print("|---|" + "---:|" * (len(ROW_HEADER) - 1))
    for label, units in by_cell.items():
        print(summary(label, units, args.goal_share))
    print(summary("**pooled**", [unit for units in by_cell.values() for unit in units], args.goal_share))


if __name__ == "__main__":
    main()
