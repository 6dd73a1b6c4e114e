"""Whether a grid unit's utilisation gap is work not done or work done after the measured window's end.

Utilisation counts useful GPU-time between a unit's first and last submission (`metrics.window`). Both policies
run the same tasks on the same fleet (one card type, so a task takes the same GPU-time wherever it runs), and every
task finishes in both, so the useful GPU-time of the whole run is the same for both but for lost progress: what one
policy does less inside the window it does after the window's end. This script simulates cardflow (or a variant)
and easy-backfill on each selected grid unit with every plan observed and prints, per cell and pooled, as points
of the fleet's GPU-time inside the window:

- *the gap*: useful inside the window, cardflow − easy-backfill (the grid's utilisation difference);
- *after the end*: useful GPU-time after the window's end (the work still running or queued when it ends), split
  into the leases already running then and those started later; *whole run*: useful GPU-time of the whole run
  (equal for both arms when lost progress is equal: the same task set); the core p95 wait beside it;
- *after the end by class*: the useful GPU-time after the window's end per task class, split by whether the task's
  work came in more than one lease (preempted after some progress), cardflow − easy-backfill;
- *span*: hours from the window's end to the last finish;
- *one span*: the utilisation difference over one span for both arms, the window's start to the later of the two last
  finishes (every task of the set done by both);
- the parts of `bench/grid_gap.py` (useful, lost, held for data, the idle GPUs by what kept them idle), the
  difference per part;
- *by tenth of the window*: the difference of useful GPU-time and of GPUs idle while no ready task waits, per tenth
  of the window (points of that tenth's capacity), and the backlog difference at each tenth's end (cumulative
  useful easy-backfill − cardflow, points of the window's capacity): a gap that grows steadily is a throughput loss
  all along; one that opens in the last tenths is the window's edge;
- *while nothing ready waits*: GPUs of tasks queued but not startable (data not ready; quota, matching or approval)
  and the share of that time with nothing queued at all;
- *per window*: each Philly window's own gap and its share of the pooled gap and of the pooled last tenth's;
- with `--tasks N`, per unit the N tasks whose useful GPU-time after the window's end differs most between the arms
  (class, GPUs, run time, the work after the end, leases with progress, the last one's start against the end), and
  the GPUs idle while no ready task waits in the last tenth.

Each unit's measurement is cached (bench/out/grid_window_end/, keyed like the grid's runs by the code digest);
easy-backfill's runs do not depend on the checkpoint share (it never preempts) and are measured once.

    nice -n 19 .venv/bin/python bench/grid_window_end.py --grid-cells checkpoint=0.8 mix=default --grid-seeds 1
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from math import inf
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import grid_gap  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies as bench  # noqa: E402
import policies_grid as grid  # noqa: E402

from shared.scheduling.model import DeferralReason, Plan, PriorityClass, QueuedTask, Snapshot  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policy_knobs import Policy  # noqa: E402
from shared.simulation.metrics import _gpu_seconds, window  # noqa: E402
from shared.simulation.engine import Simulation  # noqa: E402

CACHE = REPO / "bench" / "out" / "grid_window_end"
TENTHS = 10
NOTHING = "nothing ready waits"
NOT_READY = {"data": {DeferralReason.DATA_NOT_READY},
             "quota, matching, approval": grid_gap.READINESS - {DeferralReason.DATA_NOT_READY}}


def split_at(segments: Sequence[tuple[float, float, int]], hi: float) -> tuple[float, float]:
    """GPU-seconds after `hi` of the segments (start, end, gpus): (of those started before `hi`, of those started at
    or after it)."""
    running = sum(gpus * (end - hi) for start, end, gpus in segments if start < hi < end)
    later = sum(gpus * (end - start) for start, end, gpus in segments if start >= hi)
    return running, later


def by_tenth(stretches: Sequence[tuple[float, float, float]], lo: float, hi: float) -> list[float]:
    """The sum of value × seconds per tenth of [lo, hi] over stretches (start, end, value)."""
    width = (hi - lo) / TENTHS
    sums = [0.0] * TENTHS
    for start, end, value in stretches:
        for index in range(TENTHS):
            left = lo + index * width
            inside = min(end, left + width) - max(start, left)
            if inside > 0:
                sums[index] += value * inside
    return sums


def not_ready_gpus(queue: Sequence[QueuedTask], result: Plan) -> dict[str, float]:
    """GPUs of the queued tasks the plan deferred for a readiness reason, by group (NOT_READY); `empty`: 1 when
    nothing is queued."""
    gpus = {task.task_id: task.gpus for task in queue}
    groups = dict.fromkeys(NOT_READY, 0.0)
    for task_id, reason in zip(result.deferrals.task_ids, result.deferrals.reasons):
        for name, reasons in NOT_READY.items():
            if reason in reasons:
                groups[name] += gpus.get(task_id, 0)
    return {**groups, "empty": float(not queue)}


class TaggedSimulation(Simulation):
    """The engine, each useful segment also kept beside its task's class and id (`tagged`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tagged: list[tuple[str, str, tuple[float, float, int]]] = []

    def _close(self, run, now: float, kept_until: float) -> None:
        before = len(self.recorder.useful)
        super()._close(run, now, kept_until)
        self.tagged += [(run.task.task_id, run.task.priority_class.value, segment)
                        for segment in self.recorder.useful[before:]]

    def tasks_after_end(self, hi: float) -> dict[str, list]:
        """Per task with work after `hi` or more than one lease: [class, GPUs, useful GPU-seconds after `hi`, leases
        with progress, the last one's start less `hi` (hours), useful GPU-seconds in all]."""
        tasks: dict[str, list] = {}
        for task_id, priority_class, (start, end, gpus) in self.tagged:
            entry = tasks.setdefault(task_id, [priority_class, gpus, 0.0, 0, -inf, 0.0])
            entry[2] += gpus * max(0.0, end - max(start, hi))
            entry[3] += 1
            entry[4] = max(entry[4], (start - hi) / 3600)
            entry[5] += gpus * (end - start)
        return {task_id: entry for task_id, entry in tasks.items() if entry[2] > 0 or entry[3] > 1}

    def after_end_by_group(self, hi: float) -> dict[str, float]:
        """Useful GPU-seconds after `hi` per task class, split by whether the task's work came in more than one
        lease (it was preempted after some progress)."""
        leases: dict[str, int] = {}
        for task_id, _, _ in self.tagged:
            leases[task_id] = leases.get(task_id, 0) + 1
        groups: dict[str, float] = {}
        for task_id, priority_class, (start, end, gpus) in self.tagged:
            key = f"{priority_class}, {'preempted' if leases[task_id] > 1 else 'one lease'}"
            groups[key] = groups.get(key, 0.0) + gpus * max(0.0, end - max(start, hi))
        return groups


def measure(run: grid.Run) -> dict:
    """One arm on one unit: GPU-seconds per measure (module docstring) and the window's bounds."""
    scenario = bench.grid_scenario(run)
    lo, hi = window(scenario.tasks)
    observed: list[tuple[float, dict[str, float], dict[str, float]]] = []

    def watched(snapshot: Snapshot, queue: Sequence[QueuedTask], chosen: Policy, now: float) -> Plan:
        result = plan(snapshot, queue, chosen, now)
        parts = grid_gap.idle_parts(snapshot, queue, result, chosen)
        observed.append((now, parts, not_ready_gpus(queue, result) if parts[NOTHING] > 0 else {}))
        return result

    simulation = TaggedSimulation(scenario.tasks, scenario.cluster, run.policy, plan_fn=watched,
                                  card_model=scenario.card_model, quotas=scenario.quotas)
    recorder = simulation.run(None).recorder
    ends = [now for now, _, _ in observed[1:]] + [max(hi, observed[-1][0])]
    stretches = [(now, end, parts, waiting) for (now, parts, waiting), end in zip(observed, ends)]
    sums = {part: sum(parts[part] * max(0.0, min(end, hi) - max(now, lo)) for now, end, parts, _ in stretches)
            for part in grid_gap.IDLE}
    capacity = scenario.cluster.capacity
    sums.update(useful=_gpu_seconds(recorder.useful, lo, hi), lost=_gpu_seconds(recorder.lost, lo, hi),
                **{"held for data": _gpu_seconds(recorder.idle, lo, hi)})
    sums["unplanned"] = capacity * (hi - lo) - sum(sums[part] for part in grid_gap.PARTS if part != "unplanned")
    running, later = split_at(recorder.useful, hi)
    nothing = [(max(now, lo), min(end, hi), waiting) for now, end, _, waiting in stretches if waiting]
    return {**sums, "capacity": capacity * (hi - lo), "gpus": capacity, "lo": lo, "hi": hi,
            "after running": running, "after started later": later,
            "whole run": _gpu_seconds(recorder.useful), "lost whole run": _gpu_seconds(recorder.lost),
            "last finish": recorder.last_finish or hi,
            "core waits": [recorder.waits[task.task_id] for task in scenario.tasks
                           if task.priority_class is PriorityClass.CORE and task.task_id in recorder.waits],
            "after the end by class": simulation.after_end_by_group(hi),
            "tasks after the end": simulation.tasks_after_end(hi),
            "useful by tenth": by_tenth([(start, end, gpus) for start, end, gpus in recorder.useful], lo, hi),
            "nothing ready by tenth": by_tenth([(max(now, lo), min(end, hi), parts[NOTHING])
                                                for now, end, parts, _ in stretches], lo, hi),
            "nothing ready seconds": sum(max(0.0, end - start) for start, end, _ in nothing),
            **{f"not ready: {name}": sum(w[name] * max(0.0, end - start) for start, end, w in nothing)
               for name in (*NOT_READY, "empty")}}


def measured(run: grid.Run, code: str) -> dict:
    """`measure`, from the cache when it holds the unit (easy-backfill's stored without the checkpoint share)."""
    if not (run.policy.preemption or run.policy.fill_reservations):
        run = replace(run, cell=replace(run.cell, checkpoint_share=0.0))
    path = CACHE / f"{run.key(code)}.json"
    if path.exists() and MEASURES <= (cached := json.loads(path.read_text())).keys():
        return cached
    sums = measure(run)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sums))
    return sums


MEASURES = {"useful", "core waits", "after the end by class"}  # a cached unit without these is measured again


def points(units: Sequence[dict], key: str) -> float:
    """The units' `key` summed, as points of their window capacity."""
    return 100 * sum(unit[key] for unit in units) / sum(unit["capacity"] for unit in units)


def fair_points(pairs: Sequence[tuple[dict, dict]]) -> float:
    """Useful GPU-time of the whole run, cardflow − easy-backfill, as points of the fleet's GPU-time from the
    window's start to the later of the two last finishes (one span for both, every task done)."""
    span = sum(ours["gpus"] * (max(ours["last finish"], easy["last finish"]) - ours["lo"]) for ours, easy in pairs)
    return 100 * sum(ours["whole run"] - easy["whole run"] for ours, easy in pairs) / span


def triple(pairs: Sequence[tuple[dict, dict]], key: str) -> str:
    ours, easy = points([p[0] for p in pairs], key), points([p[1] for p in pairs], key)
    return f"{ours:.2f} / {easy:.2f} ({ours - easy:+.2f})"


def core_p95(units: Sequence[dict]) -> float:
    """The units' pooled core p95 wait, minutes."""
    return float(np.percentile([wait for unit in units for wait in unit["core waits"]] or [0.0], 95)) / 60


def edge_row(label: str, pairs: Sequence[tuple[dict, dict]]) -> str:
    """Where the gap went: inside the window, after its end (running then / started later), the whole run; the
    pooled core p95 wait beside it."""
    hours = [(ours["last finish"] - ours["hi"]) / 3600 for ours, _ in pairs]
    easy_hours = [(easy["last finish"] - easy["hi"]) / 3600 for _, easy in pairs]
    return (f"| {label} | {len(pairs)} | {triple(pairs, 'useful')} | {triple(pairs, 'after running')} | "
            f"{triple(pairs, 'after started later')} | {triple(pairs, 'whole run')} | "
            f"{triple(pairs, 'lost whole run')} | {sum(hours) / len(hours):.0f} / {sum(easy_hours) / len(easy_hours):.0f} | "
            f"{fair_points(pairs):+.2f} | {core_p95([p[0] for p in pairs]):.0f} / {core_p95([p[1] for p in pairs]):.0f} |")


EDGE_HEADER = ("| cell | units | useful in the window (the gap) | after the end: leases running then | "
               "… started later | whole run | lost, whole run | last finish, h after the end | "
               "one span | core p95 wait, min |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def parts_row(label: str, pairs: Sequence[tuple[dict, dict]]) -> str:
    """`bench/grid_gap.py`'s parts, cardflow − easy-backfill, points."""
    ours, easy = [p[0] for p in pairs], [p[1] for p in pairs]
    return (f"| {label} | {len(pairs)} | "
            + " | ".join(f"{points(ours, part) - points(easy, part):+.2f}" for part in grid_gap.PARTS) + " |")


PARTS_HEADER = ("| cell | units | " + " | ".join(grid_gap.PARTS) + " |\n|---|---:|" + "---:|" * len(grid_gap.PARTS))


def tenths_rows(pairs: Sequence[tuple[dict, dict]]) -> list[str]:
    """Per tenth of the window, cardflow − easy-backfill: useful and idle-while-nothing-ready-waits (points of the
    tenth's capacity), and the backlog difference at its end (points of the window's capacity)."""
    tenth = sum(ours["capacity"] for ours, _ in pairs) / TENTHS
    rows, backlog = [], 0.0
    for index in range(TENTHS):
        useful = sum(ours["useful by tenth"][index] - easy["useful by tenth"][index] for ours, easy in pairs)
        idle = sum(ours["nothing ready by tenth"][index] - easy["nothing ready by tenth"][index] for ours, easy in pairs)
        backlog -= useful
        rows.append(f"| {index + 1} | {100 * useful / tenth:+.2f} | {100 * idle / tenth:+.2f} | "
                    f"{100 * backlog / (tenth * TENTHS):+.2f} |")
    return rows


TENTHS_HEADER = ("| tenth of the window | useful, points of the tenth | idle while nothing ready waits, points of the "
                 "tenth | backlog at its end (easy − cardflow useful so far), points of the window |\n"
                 "|---:|---:|---:|---:|")


def waiting_row(label: str, pairs: Sequence[tuple[dict, dict]]) -> str:
    """While no ready task waits: mean GPUs of queued tasks waiting for data / for quota, matching or approval, and
    the share of that time with nothing queued, cardflow / easy-backfill; the hours of such stretches."""
    cells = []
    for name in (*NOT_READY, "empty"):
        values = []
        for arm in (0, 1):
            seconds = sum(pair[arm]["nothing ready seconds"] for pair in pairs) or 1.0
            total = sum(pair[arm][f"not ready: {name}"] for pair in pairs) / seconds
            values.append(f"{100 * total:.0f}%" if name == "empty" else f"{total:.1f}")
        cells.append(" / ".join(values))
    hours = " / ".join(f"{sum(pair[arm]['nothing ready seconds'] for pair in pairs) / 3600:.0f}" for arm in (0, 1))
    return f"| {label} | {len(pairs)} | {hours} | " + " | ".join(cells) + " |"


WAITING_HEADER = ("| cell | units | hours with GPUs idle and no ready task waiting | GPUs queued for data | "
                  "… for quota, matching, approval | nothing queued |\n|---|---:|---:|---:|---:|---:|")


GROUPS = tuple(f"{c}, {how}" for c in ("core", "standard", "opportunistic") for how in ("one lease", "preempted"))


def by_class_row(label: str, pairs: Sequence[tuple[dict, dict]]) -> str:
    """Useful GPU-time after the window's end per task class, preempted or not: cardflow − easy-backfill, points."""
    capacity = sum(ours["capacity"] for ours, _ in pairs)
    cells = [f"{100 * sum(ours['after the end by class'].get(group, 0.0) - easy['after the end by class'].get(group, 0.0) for ours, easy in pairs) / capacity:+.2f}"
             for group in GROUPS]
    return f"| {label} | {len(pairs)} | " + " | ".join(cells) + " |"


BY_CLASS_HEADER = ("| cell | units | " + " | ".join(GROUPS) + " |\n|---|---:|" + "---:|" * len(GROUPS))


def window_rows(units: Sequence[tuple[str, dict, dict]]) -> list[str]:
    """Per Philly window over the selected cells (workload, cardflow, easy-backfill per unit): its GPUs, its own gap
    (points of its GPU-time), its share of the pooled gap and of the pooled last tenth's useful difference (points of
    the pooled GPU-time)."""
    pooled = sum(ours["capacity"] for _, ours, _ in units)
    rows = []
    for workload in sorted({workload for workload, _, _ in units}):
        pairs = [(ours, easy) for name, ours, easy in units if name == workload]
        gap = sum(ours["useful"] - easy["useful"] for ours, easy in pairs)
        last = sum(ours["useful by tenth"][-1] - easy["useful by tenth"][-1] for ours, easy in pairs)
        own = sum(ours["capacity"] for ours, _ in pairs)
        rows.append(f"| {workload} | {len(pairs)} | {pairs[0][0]['gpus']} | {100 * gap / own:+.2f} | "
                    f"{100 * gap / pooled:+.2f} | {100 * last / pooled:+.2f} |")
    return rows


WINDOW_HEADER = ("| window | units | GPUs | its gap, points of its GPU-time | of the pooled gap, points | of it in the "
                 "last tenth, points |\n|---|---:|---:|---:|---:|---:|")


def top_tasks(label: str, ours: dict, easy: dict, count: int) -> list[str]:
    """The unit's tasks whose useful GPU-time after the window's end differs most, cardflow − easy-backfill, with the
    GPUs idle while no ready task waits in the last tenth (mean over it) beside the unit's label."""
    tenth = (ours["hi"] - ours["lo"]) / TENTHS
    idle = " / ".join(f"{arm['nothing ready by tenth'][-1] / tenth:.1f}" for arm in (ours, easy))
    if "tasks after the end" not in ours or "tasks after the end" not in easy:
        return [f"{label}: cached before tasks were kept (delete its bench/out/grid_window_end entries)"]
    mine, theirs = ours["tasks after the end"], easy["tasks after the end"]
    gone = [None, 0, 0.0, 1, None, 0.0]  # not kept: at most one lease, nothing after the end
    diffs = sorted(set(mine) | set(theirs), key=lambda task: -abs(mine.get(task, gone)[2] - theirs.get(task, gone)[2]))
    rows = [f"{label}: GPUs idle while no ready task waits in the last tenth, mean: {idle}"]
    for task in diffs[:count]:
        a, b = mine.get(task, gone), theirs.get(task, gone)
        starts = " / ".join("–" if arm[4] is None else f"{arm[4]:+.1f} h" for arm in (a, b))
        run = max(a[5], b[5]) / max(1, a[1] or b[1]) / 3600
        rows.append(f"  {task} ({a[0] or b[0]}, {a[1] or b[1]} GPUs, runs {run:,.1f} h): after the end "
                    f"{a[2] / 3600:,.0f} / {b[2] / 3600:,.0f} GPU-h, leases {a[3]} / {b[3]}, the last from {starts}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    grid_gap.selection_arguments(parser, ["checkpoint=0.8", "mix=default"], [1])
    parser.add_argument("--tasks", type=int, default=0, metavar="N",
                        help="per unit, the N tasks whose work after the window's end differs most")
    args = parser.parse_args()
    code = grid.code_digest()
    rows: dict[grid.Cell, list[tuple[dict, dict]]] = {}
    units: list[tuple[str, dict, dict]] = []
    tops: list[str] = []
    for run, easy_run in grid_gap.paired_runs(args):
        pair = (measured(run, code), measured(easy_run, code))
        rows.setdefault(run.cell, []).append(pair)
        units.append((run.workload, *pair))
        if args.tasks:
            tops += top_tasks(f"{run.cell.label} {run.workload} seed {run.seed}", *pair, args.tasks)
    pooled = [pair for pairs in rows.values() for pair in pairs]
    for header, make in ((EDGE_HEADER, edge_row), (PARTS_HEADER, parts_row), (WAITING_HEADER, waiting_row),
                         (BY_CLASS_HEADER, by_class_row)):
        print(header)
        for cell, pairs in sorted(rows.items()):
            print(make(cell.label, pairs))
        print(make("**pooled**", pooled))
        print()
    print(TENTHS_HEADER)
    print("\n".join(tenths_rows(pooled)))
    print()
    print(WINDOW_HEADER)
    print("\n".join(window_rows(units)))
    if tops:
        print()
        print("\n".join(tops))


if __name__ == "__main__":
    main()
