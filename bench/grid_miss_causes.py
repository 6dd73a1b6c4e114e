"""Why a grid cell misses its core p95 goal: what the tail core tasks wait for, and what taking it would cost.

For each selected cell (one or more seeds, the given Philly windows) simulates easy-backfill, the cardflow preset
and any variants (`--variant "FIELD=VALUE ..."`, e.g. the preemption bound) with every lease logged, and prints per
cell and arm:

- core p95 wait (pooled over the cell's windows and seeds, as the grid pools) and its ratio to easy-backfill's,
  utilisation (points, minus easy-backfill's), preemptions and GPU-hours of progress lost to them;
- the *tail*: the core tasks whose wait is at least that p95 — how many, their width (GPUs), the fleet's GPUs;
- their wait split into data (submission to data-ready) and the scheduler's part (data-ready to start);
- the scheduler's part as GPU-time of the GPUs each tail task finally got, by who held them meanwhile: core,
  standard, opportunistic leases (those that checkpoint apart) or nobody (idle: drained for it, or free while
  other GPUs it needed were not);
- what preempting, at the task's data-ready time, the non-core leases then on those GPUs would have lost (progress
  since their start, or a checkpoint write for leases that checkpoint) — the price of starting it at once;
- with `--core-alone`, easy-backfill on the core tasks alone on the same fleet: the core p95 that preempting every
  non-core lease at once, whatever it loses, could at best reach (its utilisation is not comparable).

Ends with one markdown row per cell and arm (and pooled over the cells), the numbers docs/BENCHMARKS.md quotes.

    nice -n 19 .venv/bin/python bench/grid_miss_causes.py --cells checkpoint=0 --seeds 1 \
        --windows 2017-09-29 2017-10-23 2017-11-16 2017-12-10 \
        --variant "preempt_after_s=0 preempt_max_lost_gpu_hours=inf" --variant "preempt_max_lost_gpu_hours=inf" \
        --core-alone
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.scheduling.model import Grant, PriorityClass  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.scheduling.policy_knobs import Policy  # noqa: E402
from shared.scheduling.preemption import PREEMPT_CHECKPOINT_COST_S  # noqa: E402
from shared.simulation.engine import Simulation  # noqa: E402
from shared.simulation.metrics import demand_gpu_s, window  # noqa: E402
from shared.simulation.runner import Scenario  # noqa: E402
from shared.simulation.state import TaskRun  # noqa: E402

import policies as bench  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_grid as grid  # noqa: E402

HOUR = 3600.0


class Holder(StrEnum):
    """Who held a GPU while a tail core task waited for it."""

    CORE = "core"
    STANDARD = "standard"
    STANDARD_CHECKPOINTING = "standard, checkpoints"
    OPPORTUNISTIC = "opportunistic"
    OPPORTUNISTIC_CHECKPOINTING = "opportunistic, checkpoints"
    IDLE = "idle"

    @classmethod
    def of(cls, priority_class: PriorityClass, checkpoints: bool) -> Holder:
        if priority_class == PriorityClass.CORE:
            return cls.CORE
        if priority_class == PriorityClass.STANDARD:
            return cls.STANDARD_CHECKPOINTING if checkpoints else cls.STANDARD
        return cls.OPPORTUNISTIC_CHECKPOINTING if checkpoints else cls.OPPORTUNISTIC


GPU = tuple[str, int]  # (node id, GPU index)


@dataclass(frozen=True, slots=True)
class Hold:
    """One lease's hold of one GPU."""

    task_id: str
    holder: Holder
    task_gpus: int  # the whole task's GPUs: preempting it stops all of them
    started: float
    work_start: float
    ended: float


@dataclass(frozen=True, slots=True)
class CoreStart:
    """A core task's first start: when its data was ready, when it started, on which GPUs."""

    task_id: str
    gpus: int
    submitted: float
    ready: float
    started: float
    placed_on: tuple[GPU, ...]


@dataclass(slots=True)
class TailWait:
    """One tail task's wait, decomposed."""

    gpus: int
    data_s: float
    scheduler_s: float
    gpu_s_by_holder: dict[Holder, float]
    loss_at_ready_gpu_h: dict[Holder, float]
    # what preempting each non-core lease on its GPUs at its data-ready time loses, by lease (task id, start)
    blockers: dict[tuple[str, float], float] = field(default_factory=dict)
    # a 1-GPU task: the least any one non-core lease running anywhere at its data-ready time would lose (None: wider)
    cheapest_gpu_h: float | None = None


def decompose(start: CoreStart, holds_by_gpu: dict[GPU, list[Hold]], leases: Sequence[Hold] = ()) -> TailWait:
    """The wait of one core task: data part, and the scheduler part as GPU-time of the GPUs it got by holder,
    and what preempting at its data-ready time the non-core leases on those GPUs would have lost (and, for a 1-GPU
    task, the cheapest non-core lease among `leases`, one hold per lease, running then)."""
    lo, hi = start.ready, max(start.ready, start.started)
    by_holder: dict[Holder, float] = defaultdict(float)
    at_ready: dict[tuple[str, float], Hold] = {}
    for gpu in start.placed_on:
        held = 0.0
        for hold in holds_by_gpu.get(gpu, ()):
            overlap = min(hold.ended, hi) - max(hold.started, lo)
            if overlap > 0:
                by_holder[hold.holder] += overlap
                held += overlap
            if hold.started <= lo < hold.ended and hi > lo:
                at_ready[(hold.task_id, hold.started)] = hold
        by_holder[Holder.IDLE] += (hi - lo) - held
    loss: dict[Holder, float] = defaultdict(float)
    blockers = {}
    for key, hold in at_ready.items():
        loss[hold.holder] += preemption_loss_gpu_h(hold, lo)
        if hold.holder != Holder.CORE:
            blockers[key] = preemption_loss_gpu_h(hold, lo)
    cheapest = None
    if start.gpus == 1 and hi > lo:
        running = [preemption_loss_gpu_h(hold, lo) for hold in leases
                   if hold.holder != Holder.CORE and hold.started <= lo < hold.ended]
        cheapest = min(running, default=None)
    return TailWait(start.gpus, max(0.0, start.ready - start.submitted), hi - lo, dict(by_holder), dict(loss),
                    blockers, cheapest)


def preemption_loss_gpu_h(hold: Hold, at: float) -> float:
    """Progress a preemption at `at` throws away: a checkpoint write for work that checkpoints (at most), all
    progress since its work began otherwise; core work is never a victim (0)."""
    if hold.holder == Holder.CORE:
        return 0.0
    ran = max(0.0, at - hold.work_start)
    if hold.holder in (Holder.STANDARD_CHECKPOINTING, Holder.OPPORTUNISTIC_CHECKPOINTING):
        ran = min(ran, PREEMPT_CHECKPOINT_COST_S)
    return hold.task_gpus * ran / HOUR


class LoggedSimulation(Simulation):
    """The simulator, keeping every lease's hold of every GPU and every core task's first start."""

    def __init__(self, scenario: Scenario, policy: Policy) -> None:
        super().__init__(scenario.tasks, scenario.cluster, policy, card_model=scenario.card_model,
                         quotas=scenario.quotas)
        self.holds_by_gpu: dict[GPU, list[Hold]] = defaultdict(list)
        self.core_starts: dict[str, CoreStart] = {}

    def _start(self, grant: Grant, now: float) -> None:
        super()._start(grant, now)
        task = self._runs[grant.task_id].task
        if task.priority_class == PriorityClass.CORE and task.task_id not in self.core_starts:
            gpus = tuple((p.node_id, index) for p in grant.placements for index in p.gpu_indices)
            self.core_starts[task.task_id] = CoreStart(task.task_id, task.gpus, task.submit_s,
                                                       max(task.submit_s, task.ready_s), now, gpus)

    def _close(self, run: TaskRun, now: float, kept_until: float) -> None:
        lease, task = run.lease, run.task
        super()._close(run, now, kept_until)
        holder = Holder.of(task.priority_class, task.checkpoint_interval_s is not None)
        for placement in lease.placements:
            for index in placement.gpu_indices:
                self.holds_by_gpu[(placement.node_id, index)].append(
                    Hold(task.task_id, holder, task.gpus, lease.started_s, lease.work_start_s, now))


@dataclass(slots=True)
class ArmRun:
    """One arm on one scenario: the grid's numbers plus the logged waits."""

    capacity_gpu_s: float
    useful_gpu_s: float
    capacity: int
    workload: str
    core_load: float  # core work's GPU-time that can fall inside the window over the fleet's
    preemptions: int
    lost_gpu_h: float
    core_waits: dict[str, float]
    core_starts: dict[str, CoreStart]
    holds_by_gpu: dict[GPU, list[Hold]] = field(repr=False)
    leases: list[Hold] = field(default_factory=list, repr=False)  # one hold per lease


def run_arm(scenario: Scenario, policy: Policy, workload: str) -> ArmRun:
    simulation = LoggedSimulation(scenario, policy)
    outcome = simulation.run()
    lo, hi = window(scenario.tasks)
    recorder = outcome.recorder
    useful = sum(max(0.0, min(end, hi) - max(start, lo)) * gpus for start, end, gpus in recorder.useful)
    core_tasks = [t for t in outcome.tasks if t.priority_class == PriorityClass.CORE]
    core = {t.task_id for t in core_tasks}
    return ArmRun(scenario.cluster.capacity * (hi - lo), useful, scenario.cluster.capacity, workload,
                  demand_gpu_s(core_tasks, lo, hi) / (scenario.cluster.capacity * (hi - lo)), recorder.preemptions,
                  recorder.lost_gpu_hours(), {t: w for t, w in recorder.waits.items() if t in core},
                  simulation.core_starts, simulation.holds_by_gpu, one_hold_per_lease(simulation.holds_by_gpu))


def one_hold_per_lease(holds_by_gpu: dict[GPU, list[Hold]]) -> list[Hold]:
    """Every lease once (a lease holds several GPUs)."""
    leases: dict[tuple[str, float], Hold] = {}
    for holds in holds_by_gpu.values():
        for hold in holds:
            leases.setdefault((hold.task_id, hold.started), hold)
    return list(leases.values())


def tail(runs: Sequence[ArmRun]) -> tuple[float, list[tuple[ArmRun, TailWait]]]:
    """The pooled core p95 wait of `runs` and the decomposed waits of the core tasks at or above it (none that
    did not wait), with the run each came from."""
    waits = [w for run in runs for w in run.core_waits.values()]
    if not waits:
        return float("nan"), []
    p95 = float(np.percentile(waits, 95))
    return p95, [(run, decompose(run.core_starts[task_id], run.holds_by_gpu, run.leases))
                 for run in runs for task_id, wait in run.core_waits.items()
                 if wait >= p95 and wait > 0 and task_id in run.core_starts]


def shares(waits: Iterable[TailWait]) -> dict[Holder, float]:
    """Share of the tail's scheduler-side GPU-time on its final GPUs, by holder."""
    total: dict[Holder, float] = defaultdict(float)
    for wait in waits:
        for holder, gpu_s in wait.gpu_s_by_holder.items():
            total[holder] += gpu_s
    whole = sum(total.values())
    return {holder: total[holder] / whole if whole else float("nan") for holder in Holder}


@dataclass(frozen=True, slots=True)
class Price:
    """What starting the tail at its data-ready times would have cost, against what its waiting cost."""

    blockers_gpu_h: float  # every distinct non-core lease on the tail's final GPUs, preempted at the first such time
    own_wait_gpu_h: float  # the tail's GPUs x their scheduler-side wait
    one_gpu_tasks: int
    cheapest_gpu_h: float  # 1-GPU tail tasks: the cheapest non-core lease anywhere, each task its own, summed
    one_gpu_wait_gpu_h: float  # ... and those tasks' own wait


def price(tagged: Sequence[tuple[ArmRun, TailWait]]) -> Price:
    blockers: dict[tuple[int, str, float], float] = {}
    for run, wait in tagged:
        for (task_id, started), loss in wait.blockers.items():
            key = (id(run), task_id, started)
            blockers[key] = min(loss, blockers.get(key, loss))  # preempted once, at the earliest tail's time
    waits = [wait for _, wait in tagged]
    narrow = [wait for wait in waits if wait.cheapest_gpu_h is not None]
    return Price(sum(blockers.values()), sum(w.gpus * w.scheduler_s for w in waits) / HOUR, len(narrow),
                 sum(w.cheapest_gpu_h for w in narrow), sum(w.scheduler_s for w in narrow) / HOUR)


def describe(name: str, runs: Sequence[ArmRun], easy: Sequence[ArmRun] | None, per_workload: bool = True) -> str:
    """One arm's line: p95 (and ratio), utilisation, losses, the tail and its causes."""
    p95, tagged = tail(runs)
    waits = [wait for _, wait in tagged]
    utilisation = sum(r.useful_gpu_s for r in runs) / sum(r.capacity_gpu_s for r in runs)
    parts = [f"{name}: core p95 {p95 / 60:.0f} min"]
    if per_workload:
        parts[0] += " (per workload, min: " + ", ".join(
            f"{run.workload} {tail([run])[0] / 60:.0f} ({run.capacity} GPUs, core load {100 * run.core_load:.0f}%)"
            for run in runs) + ")"
    if easy is not None and name == CORE_ALONE:
        parts.append(f"ratio {p95 / tail(easy)[0]:.2f}")
    elif easy is not None:
        easy_p95, _ = tail(easy)
        easy_utilisation = sum(r.useful_gpu_s for r in easy) / sum(r.capacity_gpu_s for r in easy)
        parts.append(f"ratio {p95 / easy_p95:.2f}; utilisation {100 * utilisation:.2f}% "
                     f"({100 * (utilisation - easy_utilisation):+.2f} points)")
    else:
        parts.append(f"utilisation {100 * utilisation:.2f}%")
    parts.append(f"preemptions {sum(r.preemptions for r in runs)}, lost {sum(r.lost_gpu_h for r in runs):.0f} GPU-h")
    if waits:
        widths = [w.gpus for w in waits]
        fleets = sorted({r.capacity for r in runs})
        where = Counter(run.workload for run, _ in tagged)
        parts.append(f"tail {len(waits)} tasks, GPUs median {np.median(widths):g} max {max(widths)} "
                     f"(fleets {'/'.join(map(str, fleets))}; from " + ", ".join(
                         f"{workload} {count}" for workload, count in sorted(where.items())) + ")")
        parts.append(f"the tail's own wait {price(tagged).own_wait_gpu_h:.0f} GPU-h")
        parts.append(f"mean wait: data {np.mean([w.data_s for w in waits]) / 60:.0f} min, "
                     f"scheduler {np.mean([w.scheduler_s for w in waits]) / 60:.0f} min")
        held = shares(waits)
        parts.append("its GPUs meanwhile: " + ", ".join(f"{holder} {100 * held[holder]:.0f}%" for holder in Holder))
        losses = defaultdict(float)
        for wait in waits:
            for holder, gpu_h in wait.loss_at_ready_gpu_h.items():
                losses[holder] += gpu_h
        per_task = [sum(w.loss_at_ready_gpu_h.values()) for w in waits]
        cost = price(tagged)
        fleet_gpu_h = sum(r.capacity_gpu_s for r in runs) / HOUR
        parts.append(f"preempting at data-ready the leases on its GPUs loses {cost.blockers_gpu_h:.0f} GPU-h, each "
                     f"lease once ({100 * cost.blockers_gpu_h / fleet_gpu_h:.1f} points of the fleet's "
                     f"{fleet_gpu_h:.0f} GPU-h; per task: median {np.median(per_task):.1f}; "
                     + ", ".join(f"{holder} {gpu_h:.0f}" for holder, gpu_h in losses.items() if gpu_h) + ")")
        parts.append(f"{cost.one_gpu_tasks} 1-GPU tail tasks: the cheapest non-core lease anywhere at data-ready "
                     f"loses {cost.cheapest_gpu_h:.0f} GPU-h in all, for {cost.one_gpu_wait_gpu_h:.0f} GPU-h waited")
    return "; ".join(parts)


CORE_ALONE = "core alone (bound)"


def core_alone(scenario: Scenario) -> Scenario:
    """The scenario with its core tasks only (same fleet): no non-core lease ever holds a GPU core work wants."""
    return replace(scenario, tasks=tuple(t for t in scenario.tasks if t.priority_class == PriorityClass.CORE))


ROW_HEADER = ("cell", "arm", "core p95 min", "ratio", "utilisation − easy, points", "lost GPU-h", "tail tasks",
              "tail from its top workload", "tail GPUs (median)", "tail's GPUs held: core / standard / opportunistic / "
              "idle", "preempting its GPUs' leases at data-ready: GPU-h lost / the tail's wait, GPU-h",
              "1-GPU tail: cheapest victim anywhere, GPU-h lost / waited (tasks)")


def markdown_row(label: str, name: str, runs: Sequence[ArmRun], easy: Sequence[ArmRun]) -> str:
    """One arm of one cell as a row under ROW_HEADER (checkpointing and not summed per class)."""
    p95, tagged = tail(runs)
    easy_p95, _ = tail(easy)
    waits = [wait for _, wait in tagged]

    def utilisation(group: Sequence[ArmRun]) -> float:
        return sum(r.useful_gpu_s for r in group) / sum(r.capacity_gpu_s for r in group)

    held = shares(waits)
    by_class = (held[Holder.CORE], held[Holder.STANDARD] + held[Holder.STANDARD_CHECKPOINTING],
                held[Holder.OPPORTUNISTIC] + held[Holder.OPPORTUNISTIC_CHECKPOINTING], held[Holder.IDLE])
    where = Counter(run.workload for run, _ in tagged).most_common(1)
    top = f"{where[0][1]} ({where[0][0]})" if where else "–"
    cost = price(tagged)
    cells = (label, name, f"{p95 / 60:.0f}", f"{p95 / easy_p95:.2f}" if name != "easy-backfill" else "–",
             f"{100 * (utilisation(runs) - utilisation(easy)):+.2f}" if name not in ("easy-backfill", CORE_ALONE) else "–",
             f"{sum(r.lost_gpu_h for r in runs):.0f}", str(len(waits)), top,
             f"{np.median([w.gpus for w in waits]):g}" if waits else "–",
             " / ".join(f"{100 * share:.0f}%" for share in by_class) if waits else "–", f"{cost.blockers_gpu_h:.0f} / {cost.own_wait_gpu_h:.0f}",
             f"{cost.cheapest_gpu_h:.0f} / {cost.one_gpu_wait_gpu_h:.0f} ({cost.one_gpu_tasks})")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="*", default=[], metavar="FIELD=V1,V2",
                        help="cell filters as bench/policies.py --grid-cells (checkpoint, delay, sigma, mix)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--windows", nargs="+", required=True, metavar="YYYY-MM-DD")
    parser.add_argument("--variant", action="append", default=[], metavar='"FIELD=VALUE ..."',
                        help="a cardflow variant to run too (repeatable)")
    parser.add_argument("--core-alone", action="store_true",
                        help=f"add the arm {CORE_ALONE!r}: easy-backfill on the core tasks alone, the fleet otherwise "
                             "empty — the core p95 no preemption of non-core work, however costly, could beat")
    args = parser.parse_args()
    arms = {"easy-backfill": POLICIES["easy-backfill"], "cardflow": POLICIES["cardflow"]}
    for settings in args.variant:
        arms[settings] = grid.variant(POLICIES["cardflow"], settings.split())
    pooled: dict[str, list[ArmRun]] = defaultdict(list)
    rows: list[str] = []
    for cell in grid.select_cells(grid.all_cells(), args.cells):
        by_arm: dict[str, list[ArmRun]] = defaultdict(list)
        for workload in args.windows:
            for seed in args.seeds:
                scenario = bench.grid_scenario(grid.Run(cell, workload, seed, arms["cardflow"]))
                for name, policy in arms.items():
                    by_arm[name].append(run_arm(scenario, policy, f"{workload}/{seed}"))
                if args.core_alone:
                    by_arm[CORE_ALONE].append(run_arm(core_alone(scenario), POLICIES["easy-backfill"],
                                                      f"{workload}/{seed}"))
        print(f"== {cell.label} (seeds {' '.join(map(str, args.seeds))}; {len(args.windows)} windows)", flush=True)
        for name, runs in by_arm.items():
            print("  " + describe(name, runs, None if name == "easy-backfill" else by_arm["easy-backfill"]),
                  flush=True)
            pooled[name] += runs
            rows.append(markdown_row(cell.label, name, runs, by_arm["easy-backfill"]))
    print("== pooled over the selected cells", flush=True)
    for name, runs in pooled.items():
        print("  " + describe(name, runs, None if name == "easy-backfill" else pooled["easy-backfill"], False),
              flush=True)
        rows.append(markdown_row("pooled", name, runs, pooled["easy-backfill"]))
    print("\n".join(["| " + " | ".join(ROW_HEADER) + " |", "|---|---|" + "---:|" * (len(ROW_HEADER) - 2), *rows]))


if __name__ == "__main__":
    main()
