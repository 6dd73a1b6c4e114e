"""Policy benchmark: cardflow vs fifo, priority and easy-backfill on two real GPU traces.

1. Philly (3 virtual clusters, Microsoft, 2017): a window of `--philly-days` days from
   `--philly-start`, on 8-GPU V100 nodes, as many as bring the offered load closest to 100%:
   nodes = round(demand / (window x 8)), demand = sum of GPUs x run time that can fall inside the
   window. Ablations on Philly: cardflow without headroom, and without preemption.
   Then every consecutive window of that length from `--windows-from` to `--windows-to` (the whole
   trace), each on its own fleet sized the same way, cardflow vs easy-backfill, pooled
   (bench/policies_windows.py): one window alone is a noisy judge of utilisation.
2. Alibaba openb gpuspec33 (2023): the trace's own node list (1,213 nodes, 6,212 GPUs) as the fleet;
   the snapshot's time load is light, so every GPU pod arrives once, in a seeded random order at
   random times within `--openb-window-h` hours (durations unchanged): pods requesting ~106% of
   the fleet's GPUs — the "inflation to 100-130% of capacity" its README describes. Then the same
   inflated to 130% (every pod plus seeded copies of randomly drawn pods), the top of that range.

Both traces get classes (Philly only; openb keeps its QoS mapping), estimates, readiness delays,
checkpoints and quota accounts from `--synthesize` defaults (seed 42). Every policy decision is the
production `plan()`. Results: printed tables, `docs/BENCHMARKS.md` (section between the
`<!-- policies:start -->` / `<!-- policies:end -->` markers) and plots under `docs/img/`.

3. `--grid`: the same comparison over a grid of synthesis settings (checkpoint share, data-delay share,
   estimate noise, class mix), every Philly window and openb, several seeds, per cell and pooled with
   95% intervals (bench/policies_grid.py). Runs are cached under bench/out/grid/ (a rerun simulates
   only what a code change can affect); `--grid-part K/N` runs a part, `--grid-report` aggregates the
   cache and writes the `<!-- grid:start -->` section of docs/BENCHMARKS.md and docs/img/grid-*.png.

    .venv/bin/python bench/policies.py [--jobs 2] [--philly-days 4] [--openb-window-h 0.1] [--json-dir DIR]
                                       [--only philly|windows|openb]
    nice -n 15 .venv/bin/python bench/policies.py --grid [--grid-cells checkpoint=0,0.5 mix=default ...]
                                       [--grid-seeds 42 1] [--grid-window-step 1] [--grid-part 1/4] [--jobs 2]
    .venv/bin/python bench/policies.py --grid-report [same selection]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from dataclasses import dataclass, replace
from datetime import date, datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402

from shared.scheduling.policy_knobs import Policy  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.simulation.cluster import nodes_from_rows  # noqa: E402
from shared.simulation.matching import CatalogCardModel  # noqa: E402
from shared.simulation.metrics import demand_bound, demand_gpu_s, window  # noqa: E402
from shared.simulation.report import comparison_table, markdown_table, plot, write_json  # noqa: E402
from shared.simulation.runner import (  # noqa: E402
    Scenario, build_document, new_progress, prepare_scenario, run_policies,
)
from shared.simulation.synthesize import DEFAULT_SEED, SynthesisParams  # noqa: E402
from shared.simulation.traces import load_trace  # noqa: E402
from shared.simulation.workload import Trace, resolve  # noqa: E402

import policies_grid as grid  # noqa: E402  (bench/ is on sys.path when run as a script)
import policies_windows as windows  # noqa: E402



def _traces_dir() -> Path:
    """`$CARDFLOW_TRACES_DIR`, else the nearest `shared/traces` beside the repository or a parent of
    it (a clone sits next to shared/; a worktree may sit one level deeper)."""
    if os.environ.get("CARDFLOW_TRACES_DIR"):
        return Path(os.environ["CARDFLOW_TRACES_DIR"])
    for parent in REPO.parents:
        if (parent / "shared" / "traces").is_dir():
            return parent / "shared" / "traces"
    return (REPO / ".." / "shared" / "traces").resolve()


TRACES = _traces_dir()
PHILLY = TRACES / "philly" / "philly_jobs_3vc.csv"
OPENB = TRACES / "alibaba-gpu-2023" / "openb_pod_list_gpuspec33.csv"
BENCHMARKS = REPO / "docs" / "BENCHMARKS.md"
IMAGES = REPO / "docs" / "img"
START, END = "<!-- policies:start -->", "<!-- policies:end -->"
ORDER = ("cardflow", "easy-backfill", "priority", "fifo")


@dataclass(frozen=True)
class Case:
    """One benchmark scenario and the sentences that explain how it was built."""

    key: str
    title: str
    scenario: Scenario
    setup: list[str]
    extra_policies: tuple[Policy, ...] = ()


@lru_cache(maxsize=1)
def philly_trace() -> Trace:
    return load_trace(PHILLY, "philly")


def philly_case(start: str, days: float, card_model: CatalogCardModel, seed: int = DEFAULT_SEED,
                params: SynthesisParams | None = None) -> Case:
    """A time window of the Philly trace on a V100 fleet sized for 100% offered load (fields the trace
    lacks synthesized with `seed` and `params`, default: the documented defaults)."""
    trace = philly_trace()
    lo = datetime.fromisoformat(start).replace(tzinfo=timezone.utc).timestamp()
    hi = lo + days * 86400
    sliced = trace.with_tasks([t for t in trace.tasks if lo <= t.submit_s < hi], window=f"{start} + {days:g} d")
    scenario = prepare_scenario(sliced, card_model, synthesize_seed=seed, params=params)
    first, last = window(scenario.tasks)
    demand = demand_gpu_s(scenario.tasks, first, last)
    setup = [
        f"Window: jobs submitted from {start} UTC for {days:g} days: {len(scenario.tasks):,} of the trace's "
        f"{len(trace.tasks):,} jobs (the whole trace, window by window, follows below).",
        f"Fleet: {scenario.cluster.description}. Sizing: demand = {demand / 3600:,.0f} GPU-hours that can fall "
        f"inside the {(last - first) / 3600:,.1f} h window (each job from its data-ready time, clipped at the "
        f"window end) = {demand / (last - first):,.1f} GPUs on average; nodes = round({demand / (last - first):,.1f} / 8)"
        f" = {scenario.cluster.capacity // 8} nodes of 8 V100 ({scenario.cluster.capacity} GPUs).",
    ]
    return Case("philly", f"Philly, {days:g} days from {start}", scenario, setup, ablations())


def ablations() -> tuple[Policy, ...]:
    """cardflow with one feature off, to show what each costs or buys."""
    cardflow = POLICIES["cardflow"]
    return (replace(cardflow, name="cardflow-no-headroom", headroom=0.0),
            replace(cardflow, name="cardflow-no-fill", fill_reservations=False),
            replace(cardflow, name="cardflow-no-preemption", preemption=False, fill_reservations=False),
            replace(cardflow, name="cardflow-preempt-at-once", preempt_after_s=0.0,
                    preempt_max_lost_gpu_hours=float("inf")))


def spread_arrivals(trace: Trace, window_s: float, seed: int) -> Trace:
    """Every task once, in a seeded random order, at seeded uniform-random times over `window_s`."""
    rng = random.Random(seed)
    tasks = sorted(trace.tasks, key=lambda task: task.task_id)
    rng.shuffle(tasks)
    times = sorted(rng.uniform(0.0, window_s) for _ in tasks)
    return trace.with_tasks(replace(task, submit_s=at) for task, at in zip(tasks, times))


def inflate(trace: Trace, target_gpus: float, seed: int) -> tuple[Trace, int]:
    """Every pod once, plus seeded copies of randomly drawn pods (ids `<id>-copy<N>`) until the pods
    request at least `target_gpus` GPUs: the openb authors' way of inflating the workload."""
    rng = random.Random(seed)
    tasks = sorted(trace.tasks, key=lambda task: task.task_id)
    missing, copies = target_gpus - sum(task.gpus for task in tasks), []
    while missing > 0:
        drawn = rng.choice(tasks)
        copies.append(replace(drawn, task_id=f"{drawn.task_id}-copy{len(copies) + 1}"))
        missing -= drawn.gpus
    return trace.with_tasks(tasks + copies), len(copies)


@lru_cache(maxsize=1)
def openb_trace() -> Trace:
    return load_trace(OPENB, "openb")


def openb_case(window_h: float, card_model: CatalogCardModel, target_share: float | None = None,
               seed: int = DEFAULT_SEED, params: SynthesisParams | None = None) -> Case:
    """openb gpuspec33 on its own node list, every pod (and, with `target_share`, seeded copies up to
    that share of the fleet's GPUs) arriving at a random time within `window_h` hours; open fields
    synthesized with `seed` and `params` (arrivals and copies always use the default seed)."""
    trace = openb_trace()
    fleet = nodes_from_rows(trace.cluster_nodes, "openb node list (1,213 GPU nodes)")
    workload, copies = inflate(trace, target_share * fleet.capacity, DEFAULT_SEED) if target_share else (trace, 0)
    inflated = spread_arrivals(workload, window_h * 3600, DEFAULT_SEED)
    which = f"all pods plus {copies:,} seeded copies" if copies else "all pods"
    inflated = inflated.with_tasks(inflated.tasks, arrivals=f"{which}, random order and times within {window_h:g} h")
    scenario = prepare_scenario(inflated, card_model, cluster=fleet, synthesize_seed=seed, params=params)
    requested = sum(task.gpus for task in scenario.tasks)
    notes = trace.notes
    arrivals = (f"every GPU pod arrives once, plus {copies:,} copies of randomly drawn pods (seeded) until the pods "
                f"request {target_share:.0%} of the fleet," if copies else "every GPU pod arrives once,")
    setup = [
        f"Pods: {len(trace.tasks):,} GPU pods; {notes['skipped_cpu_only']:,} CPU-only pods and "
        f"{notes['skipped_never_scheduled']:,} never-scheduled pods (no run time) skipped; "
        f"{notes['fractional_rounded_up']:,} fractional-GPU pods rounded up to one GPU.",
        f"Fleet: the node list, {fleet.summary()} ({fleet.capacity:,} GPUs).",
        f"Inflation: the pod list is a 149-day snapshot with a light time load, which its authors use as a workload "
        f"distribution inflated to 100-130% of capacity. Here {arrivals} in a seeded random order "
        f"at uniform random times within {window_h:g} h (durations unchanged): {len(scenario.tasks):,} pods requesting "
        f"{requested:,} GPUs = {requested / fleet.capacity:.0%} of the fleet. 90% of the trace's GPU-time is in 81 pods "
        "that run longer than a day (up to 145 days), so the window's bound is well below 100% and the makespan is long.",
        "QoS mapping: LS/Guaranteed = core, Burstable = standard, BE = opportunistic (docs/traces.md).",
    ]
    if target_share:
        return Case("openb-130", f"Alibaba openb gpuspec33, inflated to {target_share:.0%}, within {window_h:g} h",
                    scenario, setup)
    return Case("openb", f"Alibaba openb gpuspec33, all pods within {window_h:g} h", scenario, setup)


def run_case(case: Case, jobs: int, console: Console, images: Path | None) -> tuple[dict[str, Any], dict[str, Any], float]:
    """All four policies on one case, with a progress bar per policy; its plot goes to `images`, if given."""
    console.rule(case.title)
    for line in case.setup:
        console.print(line)
    policies = [POLICIES[name] for name in ORDER] + list(case.extra_policies)
    started = time.perf_counter()
    with new_progress() as progress:
        outcomes = run_policies(case.scenario, policies, progress=progress, jobs=jobs)
    elapsed = time.perf_counter() - started
    document = build_document(case.scenario, outcomes)
    console.print(comparison_table(document, title=case.title))
    if images is not None:
        images.mkdir(parents=True, exist_ok=True)
        plot(outcomes, case.scenario.cluster.capacity, images / f"policies-{case.key}.png", title=case.title)
    return document, outcomes, elapsed


def verdict(document: dict[str, Any]) -> str:
    """The goal, stated honestly: core p95 wait and utilisation of cardflow vs easy-backfill."""
    ours, theirs = document["policies"]["cardflow"], document["policies"]["easy-backfill"]

    def p95(result: dict[str, Any], key: str) -> float:
        return result[key].get("core", {}).get("p95", float("nan")) / 60

    wait_ok = p95(ours, "wait_s") < p95(theirs, "wait_s")
    util_ok = ours["utilisation"] >= theirs["utilisation"] - 0.0005
    return (f"core p95 wait {p95(ours, 'wait_s'):,.1f} min vs {p95(theirs, 'wait_s'):,.1f} min "
            f"({'better' if wait_ok else 'NOT better'}; after data ready {p95(ours, 'wait_after_ready_s'):,.1f} "
            f"vs {p95(theirs, 'wait_after_ready_s'):,.1f} min); utilisation {ours['utilisation']:.1%} vs "
            f"{theirs['utilisation']:.1%} ({'matches or beats' if util_ok else 'LOWER'}).")


def ablation_notes(document: dict[str, Any]) -> list[str]:
    """What the ablations say about cardflow, in sentences (empty without ablations)."""
    policies = document["policies"]
    if "cardflow-no-headroom" not in policies:
        return []
    base, easy = policies["cardflow"], policies["easy-backfill"]

    def described(name: str) -> str:
        result = policies[name]
        return (f"{result['utilisation']:.1%} utilisation, core p95 wait {result['wait_s']['core']['p95'] / 60:,.0f} min, "
                f"{result['preemptions']:,} preemptions losing {result['lost_gpu_hours']:,.0f} GPU-h")

    notes = [
        f"cardflow: {described('cardflow')}. Ablations — without headroom: {described('cardflow-no-headroom')}; "
        f"without opportunistic work filling the reservation's drain: {described('cardflow-no-fill')}; "
        f"without any preemption (and so without filling): {described('cardflow-no-preemption')}; preempting at once, whatever the victim "
        f"loses (no grace, no loss cap): {described('cardflow-preempt-at-once')}.",
        f"While data-ready tasks were queued, cardflow kept {base['utilisation_when_queued']:.1%} of the fleet doing "
        f"useful work, easy-backfill {easy['utilisation_when_queued']:.1%}.",
    ]
    return notes


def section(results: list[tuple[Case, dict[str, Any], float]], params: dict[str, Any], total_s: float,
            window_lines: list[str]) -> str:
    """The Markdown between the policies markers (the all-windows part right after the headline case)."""
    lines = [START, "## Scheduling policies on real traces (`bench/policies.py`)", "",
             f"Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
             f"({platform.python_implementation()} {platform.python_version()}) in {total_s / 60:,.1f} min "
             "on a shared 2-core machine. Every decision is the production `plan()`; metrics are defined in "
             "docs/simulation.md (wait includes waiting for data; \"after data ready\" excludes it). No quota "
             "accounts. Synthesized fields (seed 42, docs/traces.md): " + json.dumps(params) + ".", ""]
    for case, document, elapsed in results:
        lines += [f"### {case.title}", "", *[f"- {line}" for line in case.setup],
                  f"- Offered load (bound): {document['scenario']['offered_load']:.1%}; simulated in {elapsed:,.0f} s.",
                  f"- cardflow vs easy-backfill: {verdict(document)}",
                  *[f"- {note}" for note in ablation_notes(document)], "",
                  markdown_table(document), "", f"![{case.title}](img/policies-{case.key}.png)", ""]
        if case.key == "philly":
            lines += window_lines
    lines.append(END)
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace (or append) the policies section of docs/BENCHMARKS.md, keeping every other section."""
    current = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    if START in current and END in current:
        head, rest = current.split(START, 1)
        current = head + text + rest.split(END, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + text + "\n"
    BENCHMARKS.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--philly-start", default="2017-10-09")
    parser.add_argument("--philly-days", type=float, default=4.0)
    parser.add_argument("--windows-from", type=date.fromisoformat, default=date(2017, 9, 25),
                        help="first day of the all-windows comparison (Philly)")
    parser.add_argument("--windows-to", type=date.fromisoformat, default=date(2017, 12, 23),
                        help="no window starts on or after this day")
    parser.add_argument("--windows-seeds", type=int, nargs="*", default=[1, 2, 3],
                        help="also run every window with these synthesis seeds (robustness of the verdict)")
    parser.add_argument("--openb-window-h", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (policies run in parallel)")
    parser.add_argument("--only", choices=("philly", "windows", "openb", "openb-130"),
                        help="run one part only (docs not written; its plots go to --json-dir, if given)")
    parser.add_argument("--json-dir", type=Path, help="also write each case's JSON report here")
    parser.add_argument("--grid", action="store_true", help="run the grid of synthesis settings (cached)")
    parser.add_argument("--grid-report", action="store_true", help="aggregate the cached grid runs, write the docs")
    parser.add_argument("--grid-cells", nargs="*", default=[], metavar="FIELD=V1,V2",
                        help="only cells matching (fields: checkpoint, delay, sigma, mix)")
    parser.add_argument("--grid-seeds", type=int, nargs="*", default=[DEFAULT_SEED, 1])
    parser.add_argument("--grid-window-step", type=int, default=1, help="every K-th Philly window only")
    parser.add_argument("--grid-window-offset", type=int, default=0, help="... starting with this one (0-based)")
    parser.add_argument("--grid-code", metavar="DIGEST[,DIGEST]",
                        help="with --grid-report: look cached runs up under these code digests, first hit wins "
                             "(default: the code's own; for changes shown not to alter any decision)")
    parser.add_argument("--grid-part", help="K/N: run every N-th run from the K-th (spread the grid over sittings)")
    parser.add_argument("--grid-no-openb", action="store_true", help="Philly windows only")
    parser.add_argument("--grid-reuse-baselines", metavar="DIGEST[,DIGEST]",
                        help="baseline runs (no headroom, preemption or filling) may reuse results of these code "
                             "digests: for changes that touch only those rules")
    parser.add_argument("--grid-set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="run (or report) a variant of cardflow: these Policy fields changed; with --grid-report "
                             "its tables are printed, the docs' grid section is not written")
    args = parser.parse_args()
    if args.grid or args.grid_report:
        console = Console()
        run_grid(args, console if console.is_terminal else Console(width=220))  # a wide table in logs
        return
    console, card_model, started = Console(), CatalogCardModel(), time.perf_counter()
    builders = {"philly": lambda: philly_case(args.philly_start, args.philly_days, card_model),
                "openb": lambda: openb_case(args.openb_window_h, card_model),
                "openb-130": lambda: openb_case(args.openb_window_h, card_model, target_share=1.3)}
    results, window_lines = [], []
    images = IMAGES if args.only is None else args.json_dir  # docs/img only with the docs
    for key in ("philly", "windows", "openb", "openb-130"):
        if args.only not in (None, key):
            continue
        if key == "windows":
            window_lines = run_all_windows(args, card_model, console, images)
            continue
        case = builders[key]()
        document, _, elapsed = run_case(case, args.jobs, console, images)
        console.print(f"cardflow vs easy-backfill: {verdict(document)}")
        for note in ablation_notes(document):
            console.print(note)
        if args.json_dir:
            write_json(document, args.json_dir / f"policies-{key}.json")
        results.append((case, document, elapsed))
    if args.only is None:
        params = SynthesisParams().describe(DEFAULT_SEED)
        write_section(section(results, params, time.perf_counter() - started, window_lines))
        console.print(f"wrote {BENCHMARKS.relative_to(REPO)} and docs/img/policies-*.png")


def run_all_windows(args: argparse.Namespace, card_model: CatalogCardModel, console: Console, images: Path | None) -> list[str]:
    """cardflow vs easy-backfill on every Philly window; the Markdown lines for the docs."""
    days = int(args.philly_days)
    starts = windows.window_starts(args.windows_from, args.windows_to, days)
    console.rule(f"Philly, every {days}-day window from {starts[0]} ({len(starts)} windows)")
    by_seed, elapsed = {}, 0.0
    for seed in dict.fromkeys([DEFAULT_SEED, *args.windows_seeds]):  # the default seed first, no repeats
        if seed != DEFAULT_SEED:
            console.print(f"same windows, synthesized with seed {seed}")
        by_seed[seed], took = windows.run_windows(
            starts, lambda start, seed=seed: philly_case(start.isoformat(), days, card_model, seed).scenario,
            args.jobs, console)
        elapsed += took
    results = by_seed[DEFAULT_SEED]
    console.print(windows.table(results))
    if images is not None:
        images.mkdir(parents=True, exist_ok=True)
        windows.plot(results, images / "policies-philly-windows.png")
    console.print(f"cardflow vs easy-backfill, all windows: {windows.verdict(windows.pooled(results))}")
    console.print(windows.seeds_table(by_seed))
    if args.json_dir:
        args.json_dir.mkdir(parents=True, exist_ok=True)
        document = {**windows.as_json(results), "by_seed": {seed: windows.pooled(r) for seed, r in by_seed.items()}}
        (args.json_dir / "policies-philly-windows.json").write_text(json.dumps(document, indent=2))
    return windows.section_lines(results, elapsed, days, by_seed)



def grid_scenario(run: grid.Run) -> Scenario:
    """The scenario of one grid run: a Philly window or openb, synthesized with the cell's settings."""
    card_model, params = CatalogCardModel(), run.cell.params()
    if run.workload == grid.OPENB:
        return openb_case(0.1, card_model, seed=run.seed, params=params).scenario
    return philly_case(run.workload, 4.0, card_model, run.seed, params).scenario


def run_grid(args: argparse.Namespace, console: Console) -> None:
    """Run (or, with --grid-report, only aggregate) the selected grid; print and maybe write the results."""
    cells = grid.select_cells(grid.all_cells(), args.grid_cells)
    starts = windows.window_starts(args.windows_from, args.windows_to, 4)[args.grid_window_offset::max(1, args.grid_window_step)]
    policies = [POLICIES[name] for name in grid.COMPARED]
    if args.grid_set:
        policies[0] = grid.variant(policies[0], args.grid_set)
        console.print(f"cardflow variant: {' '.join(args.grid_set)}")
    runs = grid.plan_runs(cells, starts, args.grid_seeds, policies, openb=not args.grid_no_openb)
    if args.grid_report:
        code = args.grid_code or grid.code_digest()
        baselines = args.grid_reuse_baselines.split(",") if args.grid_reuse_baselines else []
        results = {run: hit for run in runs if (hit := grid.cached_any(
            run, code.split(",") + (baselines if grid.is_baseline(run.policy) else []))) is not None}
        console.print(f"grid report: {len(results):,} of {len(runs):,} selected runs are cached for code {code}")
    else:
        baselines = args.grid_reuse_baselines.split(",") if args.grid_reuse_baselines else []
        results = grid.run_grid(grid.part_of(runs, args.grid_part), grid_scenario, args.jobs, console, baselines)
    families = {"Philly, every window": lambda w: w != grid.OPENB, "openb gpuspec33": lambda w: w == grid.OPENB}
    tables = {}
    for title, family in families.items():
        rows = grid.summary_rows(grid.units_by_cell(results, family))
        if rows:
            console.print(grid.table(rows, f"grid — {title}"))
            tables[title] = rows
    if args.grid_report and args.grid_set:
        preset = [replace(run, policy=POLICIES["cardflow"]) if run.policy.name == "cardflow" else run for run in runs]
        codes = code.split(",") + baselines
        preset_results = {run: hit for run in preset if (hit := grid.cached_any(run, codes)) is not None}
        for title, family in families.items():
            lines = grid.variant_rows(grid.summary_rows(grid.units_by_cell(preset_results, family)),
                                      tables.get(title, []))
            if lines:
                console.rule(f"{title}: the variant ({' '.join(args.grid_set)}) beside the cardflow preset")
                console.print("\n".join(["| " + " | ".join(grid.VARIANT_HEADER) + " |",
                                          "|---|" + "---:|" * (len(grid.VARIANT_HEADER) - 2) + "---|",
                                          *["| " + " | ".join(line) + " |" for line in lines]]), soft_wrap=True)
    if args.grid_report and tables and not args.grid_set:
        write_grid_section(tables, cells, starts, args.grid_seeds, len(results), len(runs),
                           code + (f"; baselines also from {args.grid_reuse_baselines}" if args.grid_reuse_baselines else ""))


GRID_START, GRID_END = "<!-- grid:start -->", "<!-- grid:end -->"


def write_grid_section(tables: dict[str, list[dict[str, Any]]], cells: list[grid.Cell], starts: list[date],
                       seeds: list[int], cached_runs: int, selected_runs: int, code: str) -> None:
    """The grid's section of docs/BENCHMARKS.md and one plot per metric (Philly)."""
    lines = [GRID_START, "## The grid: cardflow vs easy-backfill across synthesis settings (`bench/policies.py --grid`)", "",
             f"Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from {cached_runs:,} cached runs "
             f"(of {selected_runs:,} selected; code digest {code}): {len(cells)} cells, {len(starts)} Philly windows "
             f"from {starts[0]} (every {(starts[1] - starts[0]).days if len(starts) > 1 else 4} days), synthesis seeds "
             f"{', '.join(map(str, seeds))}. A unit is one (workload, seed) of a cell; intervals are 95% "
             "bootstrap intervals over units. Goal per cell: core p95 wait ≤ 0.5× easy-backfill's where tasks "
             "checkpoint, ≤ 0.8× where none do; utilisation ≥ easy-backfill's; no unfinished task; ≥ 95% of the "
             "fleet busy while ready work waits.", ""]
    for title, rows in tables.items():
        lines += [f"### {title}", "", *grid.markdown(rows), ""]
    philly = tables.get("Philly, every window")
    if philly:
        for key, title in grid.PLOTS.items():
            grid.plot(philly, key, f"Philly, every window: {title}", IMAGES / f"grid-{key}.png")
            lines += [f"![{title}](img/grid-{key}.png)", ""]
    lines.append(GRID_END)
    text = "\n".join(lines)
    current = BENCHMARKS.read_text()
    if GRID_START in current and GRID_END in current:
        head, rest = current.split(GRID_START, 1)
        current = head + text + rest.split(GRID_END, 1)[1]
    else:
        current = current.replace(END, END + "\n\n" + text, 1)
    BENCHMARKS.write_text(current)


if __name__ == "__main__":
    main()
