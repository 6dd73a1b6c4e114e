"""Policy benchmark, part 3: the grid — cardflow vs easy-backfill across synthesis settings.

A policy result counts only if it holds on workloads it was not tuned on, so the synthesized fields
are varied over a grid of cells:

    checkpoint share {0, 0.5, 0.8} x data-delay share {0, 0.25} x estimate noise sigma {0.3, 0.6, 1.0}
    x class mix {default 20/50/30, core-heavy 30/60/10 (core/standard/opportunistic)}  = 36 cells

and every cell runs over every 4-day Philly window (each on its own V100 fleet sized for ~100%
offered load, as in part 2) and openb gpuspec33 (its node list, all pods within 0.1 h; its classes
come from the pods' QoS, so the class mix does not change it), for each synthesis seed asked for.

One *run* = (cell, workload, seed, policy). Runs are cached on disk (`bench/out/grid/`, gitignored)
under a key made of everything that determines them — the policy's fields, the cell, the workload,
the seed, and a digest of the scheduling and simulation code — so a rerun after a change only
simulates what the change can affect. Inputs a policy provably ignores are left out of its key:
a policy that never preempts (and so never lets work fill a reservation) ignores checkpoints, and
openb ignores the class mix. `--part K/N` runs every N-th run (so the grid can be spread over
several sittings or machines), `--report` only aggregates what is cached.

Per cell and pooled over all cells: core p95 wait (cardflow ÷ easy-backfill) with a 95% bootstrap
interval over (window, seed) units, utilisation difference (points) with its interval,
`utilisation_when_queued` of both, unfinished tasks, preemptions; a verdict against the goal
(core p95 ratio <= 0.5 where tasks checkpoint, <= 0.8 where none do; utilisation >= easy-backfill's;
no unfinished task; >= 95% busy while ready work waits) and one plot per metric.

Used by bench/policies.py (`--grid ...`, see its docstring); not a script of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields, replace
from datetime import date
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

import shared.scheduling.plan  # noqa: F401  (loaded before any worker forks: runs use the code they were keyed by)
from shared.scheduling.model import PriorityClass
from shared.scheduling.policy_knobs import Policy
from shared.simulation.metrics import busy_while_queued, window
from shared.simulation.runner import Scenario, simulate_policy
from shared.simulation.synthesize import SynthesisParams

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / "out" / "grid"
CODE_DIRS = (REPO / "shared" / "scheduling", REPO / "shared" / "simulation")
COMPARED = ("cardflow", "easy-backfill")
CHECKPOINT_SHARES = (0.0, 0.5, 0.8)
DELAY_SHARES = (0.0, 0.25)
NOISE_SIGMAS = (0.3, 0.6, 1.0)
CLASS_MIXES = {
    "default": {"core": 0.2, "standard": 0.5, "opportunistic": 0.3},
    "core-heavy": {"core": 0.3, "standard": 0.6, "opportunistic": 0.1},
}
OPENB = "openb"
# Policy fields added after runs were first cached, with the value that leaves the rules as they were:
# at that value a field stays out of the cache key, so earlier runs (and baselines) still count.
KEY_NEUTRAL = {"headroom_counts_reclaimable_only": False, "headroom_core_demand": "present",
               "preemption_spares_ending": False, "preemption_budget_share": 0.0,
               "preemption_budget_basis": "wait", "preempt_at_once": "never",
               "standard_borrows_within_graces": 0.0, "checkpointing_standard_borrows": False,
               "fillers_yield_at_once": False, "checkpointing_standard_yields": False,
               "holder_reclaims_within_headroom": False, "reclaiming_holder_keeps_headroom": False,
               "standard_yields_within_width": False, "standard_yields_priced": False,
               "standard_yields_drain_priced": False, "standard_yields_drain_kth_hole": False,
               "standard_yields_restart_after_headroom": False,
               "standard_yields_restart_after_queue": False, "standard_yields_any_width_after_s": None,
               "fillers_after_opportunistic": False, "holder_consolidates": False, "consolidate_after_s": 3600.0}
RESAMPLES = 1000
GOAL_RATIO_CHECKPOINTING, GOAL_RATIO_NONE, GOAL_BUSY_WHEN_QUEUED = 0.5, 0.8, 0.95


@dataclass(frozen=True, order=True)
class Cell:
    """One combination of synthesis settings."""

    checkpoint_share: float
    delay_share: float
    noise_sigma: float
    class_mix: str

    @property
    def label(self) -> str:
        return f"ckpt {self.checkpoint_share:g} · delay {self.delay_share:g} · σ {self.noise_sigma:g} · {self.class_mix}"

    def params(self) -> SynthesisParams:
        return replace(SynthesisParams(), checkpoint_share=self.checkpoint_share, ready_share=self.delay_share,
                       estimate_sigma=self.noise_sigma, class_mix=dict(CLASS_MIXES[self.class_mix]))

    @property
    def goal_ratio(self) -> float:
        return GOAL_RATIO_CHECKPOINTING if self.checkpoint_share > 0 else GOAL_RATIO_NONE


def all_cells() -> list[Cell]:
    return [Cell(*values) for values in product(CHECKPOINT_SHARES, DELAY_SHARES, NOISE_SIGMAS, CLASS_MIXES)]


def select_cells(cells: Sequence[Cell], filters: Sequence[str]) -> list[Cell]:
    """Cells matching every `field=v1,v2` filter (fields: checkpoint, delay, sigma, mix)."""
    fields = {"checkpoint": "checkpoint_share", "delay": "delay_share", "sigma": "noise_sigma", "mix": "class_mix"}
    chosen = list(cells)
    for item in filters:
        name, _, values = item.partition("=")
        if name not in fields or not values:
            raise ValueError(f"bad cell filter {item!r}; expected e.g. checkpoint=0,0.8 (fields: {', '.join(fields)})")
        attribute = fields[name]
        wanted = {_value(value) for value in values.split(",")}
        chosen = [cell for cell in chosen if getattr(cell, attribute) in wanted]
    return chosen


def _value(text: str) -> float | str:
    """A filter value: a number when it reads as one (so 1 and 1.0 are the same), else the text."""
    try:
        return float(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Run:
    """One simulation: a policy on one workload of one cell with one seed."""

    cell: Cell
    workload: str  # a Philly window start (ISO date) or "openb"
    seed: int
    policy: Policy

    def key(self, code: str) -> str:
        """Cache key: everything the result depends on (inputs a policy ignores left out)."""
        cell = asdict(self.cell)
        if not (self.policy.preemption or self.policy.fill_reservations):
            cell["checkpoint_share"] = None  # never preempted: checkpoints change nothing
        if self.workload == OPENB:
            cell["class_mix"] = None  # classes come from the pods' QoS
        policy = {k: v for k, v in asdict(self.policy).items()
                  if k != "name" and not (k in KEY_NEUTRAL and v == KEY_NEUTRAL[k])}
        text = json.dumps({"cell": cell, "workload": self.workload, "seed": self.seed, "policy": policy,
                           "code": code}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def variant(policy: Policy, settings: Sequence[str]) -> Policy:
    """`policy` with fields changed by `FIELD=VALUE` settings (true/false, numbers, none, or text);
    it keeps its name, so it is compared where the policy would be (the cache key has every field)."""
    known = {item.name for item in fields(Policy)}
    changes: dict[str, Any] = {}
    for setting in settings:
        name, sep, text = setting.partition("=")
        if not sep or name not in known or name == "name":
            raise ValueError(f"bad policy setting {setting!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(sorted(known - {'name'}))}")
        value = {"true": True, "false": False, "none": None}.get(text.lower(), _value(text))
        current = getattr(policy, name)
        if isinstance(value, float) and isinstance(current, int) and not isinstance(current, bool):
            value = int(value)  # an int field keeps its type (and the cache key its spelling)
        changes[name] = value
    return replace(policy, **changes)


def code_digest() -> str:
    """A digest of the scheduling and simulation code: a change there invalidates cached runs."""
    digest = hashlib.sha256()
    for folder in CODE_DIRS:
        for path in sorted(folder.rglob("*.py")):
            digest.update(path.relative_to(REPO).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def plan_runs(cells: Sequence[Cell], windows: Sequence[date], seeds: Sequence[int], policies: Sequence[Policy],
              openb: bool = True) -> list[Run]:
    """Every run of the selection: the Philly windows of every cell first, then openb (the slowest
    and, its core waits being mostly data waits, the least telling), so a partial run covers cells."""
    philly = [Run(cell, start.isoformat(), seed, policy)
              for cell, start, seed, policy in product(cells, windows, seeds, policies)]
    return philly + ([Run(cell, OPENB, seed, policy) for cell, seed, policy in product(cells, seeds, policies)]
                     if openb else [])


def part_of(runs: Sequence[Run], part: str | None) -> list[Run]:
    """`K/N`: every N-th run starting at the K-th (1-based); None: all."""
    if part is None:
        return list(runs)
    k, _, n = part.partition("/")
    index, count = int(k), int(n)
    if not 1 <= index <= count:
        raise ValueError(f"bad --part {part!r}: expected K/N with 1 <= K <= N")
    return [run for position, run in enumerate(runs) if position % count == index - 1]


def cached(run: Run, code: str) -> dict[str, Any] | None:
    path = CACHE / f"{run.key(code)}.json"
    return json.loads(path.read_text()) if path.exists() else None


def cached_any(run: Run, codes: Sequence[str]) -> dict[str, Any] | None:
    """The run's cached result under the first of `codes` that has one."""
    for code in codes:
        hit = cached(run, code)
        if hit is not None:
            return hit
    return None


def measure(scenario: Scenario, policy: Policy) -> dict[str, Any]:
    """Simulate one policy on one scenario; the numbers the grid pools."""
    started = time.perf_counter()
    outcome = simulate_policy(scenario, policy, None, None)
    lo, hi = window(scenario.tasks)
    capacity = scenario.cluster.capacity
    recorder = outcome.recorder
    useful = sum(max(0.0, min(end, hi) - max(start, lo)) * gpus for start, end, gpus in recorder.useful)
    busy, offered = busy_while_queued(recorder, capacity, lo, hi)
    core = [t.task_id for t in outcome.tasks if t.priority_class == PriorityClass.CORE]
    return {
        "capacity_gpu_s": capacity * (hi - lo),
        "useful_gpu_s": useful,
        "busy_queued_gpu_s": busy,
        "offered_queued_gpu_s": offered,
        "core_waits_s": [recorder.waits[t] for t in core if t in recorder.waits],
        "core_tasks": len(core),
        "unfinished": outcome.unfinished,
        "preemptions": recorder.preemptions,
        "lost_gpu_hours": recorder.lost_gpu_hours(),
        "tasks": len(outcome.tasks),
        "simulated_s": time.perf_counter() - started,
    }


def execute(run: Run, code: str, build: Callable[[Run], Scenario]) -> dict[str, Any]:
    """Simulate one run (in a worker process) and store it in the cache."""
    result = {"cell": asdict(run.cell), "workload": run.workload, "seed": run.seed, "policy": run.policy.name,
              **measure(build(run), run.policy)}
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{run.key(code)}.json"
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(result))
    temporary.replace(path)
    return result


def is_baseline(policy: Policy) -> bool:
    """No headroom, no preemption, no filling: none of the cardflow-only rules applies to it."""
    return not (policy.headroom or policy.preemption or policy.fill_reservations)


def run_grid(runs: Sequence[Run], build: Callable[[Run], Scenario], jobs: int, console: Console,
             baseline_codes: Sequence[str] = ()) -> dict[Run, dict]:
    """Every run, from the cache where possible, the rest in `jobs` worker processes (one progress bar).
    `baseline_codes`: code digests whose results a baseline run may reuse (for changes shown to touch
    only rules a baseline does not use — headroom, preemption, filling)."""
    code = code_digest()
    results: dict[Run, dict] = {}
    missing = []
    for run in runs:
        hit = cached_any(run, [code, *baseline_codes] if is_baseline(run.policy) else [code])
        if hit is None:
            missing.append(run)
        else:
            results[run] = hit
    console.print(f"grid: {len(runs):,} runs, {len(results):,} cached, {len(missing):,} to simulate "
                  f"({jobs} worker process{'es' if jobs > 1 else ''}; cache {CACHE.relative_to(REPO)})")
    columns = (TextColumn("[bold]grid"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("grid", total=len(runs), completed=len(results))
        if jobs <= 1:
            for run in missing:
                results[run] = execute(run, code, build)
                progress.advance(bar)
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(execute, run, code, build): run for run in missing}
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    progress.advance(bar)
    return results


# -- pooling -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Unit:
    """One (workload, seed) of a cell: both policies' results on the same scenario."""

    ours: dict[str, Any]
    theirs: dict[str, Any]


def units_by_cell(results: dict[Run, dict], family: Callable[[str], bool]) -> dict[Cell, list[Unit]]:
    """Pairs of cardflow / easy-backfill results per cell, for workloads `family` accepts."""
    by_key: dict[tuple, dict[str, dict]] = {}
    for run, result in results.items():
        if family(run.workload):
            by_key.setdefault((run.cell, run.workload, run.seed), {})[run.policy.name] = result
    cells: dict[Cell, list[Unit]] = {}
    for (cell, _, _), pair in sorted(by_key.items(), key=lambda item: (item[0][0], item[0][1], item[0][2])):
        if all(name in pair for name in COMPARED):
            cells.setdefault(cell, []).append(Unit(pair[COMPARED[0]], pair[COMPARED[1]]))
    return cells


def pooled(units: Sequence[Unit]) -> dict[str, float]:
    """Pooled numbers of a set of units: utilisation and busy-while-queued share per policy (sums
    of GPU-seconds), core p95 wait per policy over every core task, unfinished and preemptions."""
    out: dict[str, float] = {}
    for side, name in (("ours", "cardflow"), ("theirs", "easy-backfill")):
        parts = [getattr(unit, side) for unit in units]
        waits = [w for part in parts for w in part["core_waits_s"]]
        offered = sum(part["offered_queued_gpu_s"] for part in parts)
        out[f"{name}.utilisation"] = sum(part["useful_gpu_s"] for part in parts) / sum(part["capacity_gpu_s"] for part in parts)
        out[f"{name}.busy_when_queued"] = sum(part["busy_queued_gpu_s"] for part in parts) / offered if offered else float("nan")
        out[f"{name}.core_p95_s"] = float(np.percentile(waits, 95)) if waits else float("nan")
        out[f"{name}.unfinished"] = sum(part["unfinished"] for part in parts)
        out[f"{name}.preemptions"] = sum(part["preemptions"] for part in parts)
    out["utilisation_diff"] = out["cardflow.utilisation"] - out["easy-backfill.utilisation"]
    theirs = out["easy-backfill.core_p95_s"]
    out["core_p95_ratio"] = out["cardflow.core_p95_s"] / theirs if theirs > 0 else float("nan")
    return out


def bootstrap(units: Sequence[Unit], resamples: int = RESAMPLES, seed: int = 0) -> dict[str, tuple[float, float]]:
    """95% intervals of the utilisation difference and the core p95 ratio, resampling units with
    replacement (fixed RNG seed: the same cache gives the same intervals)."""
    rng = np.random.default_rng(seed)
    diffs, ratios = [], []
    for _ in range(resamples):
        sample = [units[i] for i in rng.integers(0, len(units), size=len(units))]
        numbers = pooled(sample)
        diffs.append(numbers["utilisation_diff"])
        ratios.append(numbers["core_p95_ratio"])
    return {"utilisation_diff": _interval(diffs), "core_p95_ratio": _interval(ratios)}


def _interval(values: Iterable[float]) -> tuple[float, float]:
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return float("nan"), float("nan")
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def verdict(cell: Cell | None, numbers: dict[str, float]) -> list[str]:
    """The goals a cell misses (empty: every goal met). `cell` None: pooled over cells (0.5 and 0.8
    both apply somewhere, so the ratio is judged by the cells)."""
    misses = []
    ratio = numbers["core_p95_ratio"]
    if cell is not None and not ratio <= cell.goal_ratio:
        misses.append(f"core p95 ratio {ratio:.2f} > {cell.goal_ratio:g}")
    if numbers["utilisation_diff"] < 0:
        misses.append(f"utilisation {100 * numbers['utilisation_diff']:+.2f} points")
    if numbers["cardflow.unfinished"]:
        misses.append(f"{numbers['cardflow.unfinished']:.0f} unfinished")
    if not numbers["cardflow.busy_when_queued"] >= GOAL_BUSY_WHEN_QUEUED:
        misses.append(f"busy while queued {numbers['cardflow.busy_when_queued']:.1%}")
    return misses


def summary_rows(cells: dict[Cell, list[Unit]], resamples: int = RESAMPLES) -> list[dict[str, Any]]:
    """One row per cell plus a last row pooled over every cell (unit = cell, workload, seed)."""
    rows = []
    for cell, units in sorted(cells.items()):
        numbers = pooled(units)
        rows.append({"cell": cell, "units": len(units), **numbers, "ci": bootstrap(units, resamples),
                     "misses": verdict(cell, numbers)})
    everything = [unit for units in cells.values() for unit in units]
    if everything:
        numbers = pooled(everything)
        rows.append({"cell": None, "units": len(everything), **numbers, "ci": bootstrap(everything, resamples),
                     "misses": verdict(None, numbers)})
    return rows


# -- presentation --------------------------------------------------------------------------------

HEADER = ["cell", "units", "core p95 cardflow / easy", "ratio (95% CI)", "utilisation cardflow / easy",
          "difference, points (95% CI)", "busy while queued cardflow / easy", "unfinished", "preemptions",
          "verdict"]


def row_cells(row: dict[str, Any]) -> list[str]:
    cell: Cell | None = row["cell"]
    ratio_ci, diff_ci = row["ci"]["core_p95_ratio"], row["ci"]["utilisation_diff"]
    return [
        cell.label if cell else "**pooled over every cell**",
        str(row["units"]),
        f"{row['cardflow.core_p95_s'] / 60:,.0f} / {row['easy-backfill.core_p95_s'] / 60:,.0f} min",
        f"{row['core_p95_ratio']:.2f} ({ratio_ci[0]:.2f}–{ratio_ci[1]:.2f})",
        f"{row['cardflow.utilisation']:.2%} / {row['easy-backfill.utilisation']:.2%}",
        f"{100 * row['utilisation_diff']:+.2f} ({100 * diff_ci[0]:+.2f} to {100 * diff_ci[1]:+.2f})",
        f"{row['cardflow.busy_when_queued']:.1%} / {row['easy-backfill.busy_when_queued']:.1%}",
        f"{row['cardflow.unfinished']:.0f} / {row['easy-backfill.unfinished']:.0f}",
        f"{row['cardflow.preemptions']:,.0f}",
        "met" if not row["misses"] else "; ".join(row["misses"]),
    ]


def table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    view = Table(title=title)
    for column in HEADER:
        view.add_column(column, justify="left" if column in ("cell", "verdict") else "right")
    for row in rows:
        view.add_row(*row_cells(row))
    return view


def markdown(rows: Sequence[dict[str, Any]]) -> list[str]:
    return ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * (len(HEADER) - 2) + "---|",
            *["| " + " | ".join(row_cells(row)) + " |" for row in rows]]


# A variant hurts a cell if it loses more utilisation than this, or its core p95 grows by more than
# this share, or it leaves more tasks unfinished; it helps if it hurts nowhere and gains that much.
VARIANT_UTILISATION_POINTS, VARIANT_P95_SHARE = 0.05, 0.02
VARIANT_HEADER = ["cell", "units", "core p95 preset → variant (easy)", "utilisation preset → variant (easy)",
                  "busy while queued preset → variant", "unfinished preset / variant", "preemptions preset → variant",
                  "effect"]


def variant_effect(preset: dict[str, Any], changed: dict[str, Any]) -> str:
    """helps / neutral / hurts (with what) — the variant's pooled numbers against the preset's."""
    util = 100 * (changed["cardflow.utilisation"] - preset["cardflow.utilisation"])
    p95_before, p95_after = preset["cardflow.core_p95_s"], changed["cardflow.core_p95_s"]
    hurts = []
    if util < -VARIANT_UTILISATION_POINTS:
        hurts.append(f"utilisation {util:+.2f} points")
    if p95_after > p95_before * (1 + VARIANT_P95_SHARE):
        hurts.append(f"core p95 x{p95_after / p95_before:.2f}")
    if changed["cardflow.unfinished"] > preset["cardflow.unfinished"]:
        hurts.append(f"{changed['cardflow.unfinished']:.0f} unfinished")
    if hurts:
        return "hurts: " + "; ".join(hurts)
    if util > VARIANT_UTILISATION_POINTS or p95_after < p95_before * (1 - VARIANT_P95_SHARE):
        return "helps"
    return "neutral"


def variant_rows(preset_rows: Sequence[dict[str, Any]], changed_rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Per cell (and pooled), the variant beside the preset it changes (rows from `summary_rows` over
    the same units)."""
    by_cell = {row["cell"]: row for row in preset_rows}
    lines = []
    for row in changed_rows:
        before = by_cell.get(row["cell"])
        if before is None or before["units"] != row["units"]:
            continue
        lines.append([
            row["cell"].label if row["cell"] else "**pooled over every cell**", str(row["units"]),
            f"{before['cardflow.core_p95_s'] / 60:,.0f} → {row['cardflow.core_p95_s'] / 60:,.0f} "
            f"({row['easy-backfill.core_p95_s'] / 60:,.0f}) min",
            f"{before['cardflow.utilisation']:.2%} → {row['cardflow.utilisation']:.2%} ({row['easy-backfill.utilisation']:.2%})",
            f"{before['cardflow.busy_when_queued']:.1%} → {row['cardflow.busy_when_queued']:.1%}",
            f"{before['cardflow.unfinished']:.0f} / {row['cardflow.unfinished']:.0f}",
            f"{before['cardflow.preemptions']:,.0f} → {row['cardflow.preemptions']:,.0f}",
            variant_effect(before, row),
        ])
    return lines


PLOTS = {
    "core-p95-ratio": "core p95 wait, cardflow ÷ easy-backfill",
    "utilisation-diff": "utilisation, cardflow − easy-backfill (points)",
    "busy-when-queued": "busy while ready work waits",
    "unfinished": "unfinished tasks (cardflow)",
}


def plot(rows: Sequence[dict[str, Any]], metric: str, title: str, path: Path) -> None:
    """One metric over the cells: bars with 95% intervals where there are some, and the goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [row for row in rows if row["cell"] is not None]
    x = np.arange(len(cells))
    figure, axis = plt.subplots(figsize=(max(8, 0.35 * len(cells) + 3), 4.5), constrained_layout=True)
    if metric == "core-p95-ratio":
        values = [row["core_p95_ratio"] for row in cells]
        errors = _errors(values, [row["ci"]["core_p95_ratio"] for row in cells])
        axis.bar(x, values, yerr=errors, capsize=2, color=["tab:green" if not row["misses"] else "tab:red" for row in cells])
        axis.scatter(x, [row["cell"].goal_ratio for row in cells], marker="_", s=200, color="black", label="goal")
        axis.axhline(1.0, color="grey", linewidth=0.5)
    elif metric == "utilisation-diff":
        values = [100 * row["utilisation_diff"] for row in cells]
        errors = _errors(values, [tuple(100 * v for v in row["ci"]["utilisation_diff"]) for row in cells])
        axis.bar(x, values, yerr=errors, capsize=2, color=["tab:green" if v >= 0 else "tab:red" for v in values])
        axis.axhline(0.0, color="black", linewidth=0.8, label="goal: at least 0")
    elif metric == "busy-when-queued":
        axis.bar(x - 0.2, [100 * row["cardflow.busy_when_queued"] for row in cells], width=0.4, label="cardflow")
        axis.bar(x + 0.2, [100 * row["easy-backfill.busy_when_queued"] for row in cells], width=0.4, label="easy-backfill")
        axis.axhline(100 * GOAL_BUSY_WHEN_QUEUED, color="black", linestyle="--", linewidth=0.8, label="goal 95%")
        axis.set_ylim(min(80, *[100 * row["cardflow.busy_when_queued"] for row in cells]) - 1, 100.5)
    else:
        axis.bar(x, [row["cardflow.unfinished"] for row in cells], color="tab:red")
        axis.set_ylim(0, max(1, *[row["cardflow.unfinished"] for row in cells]) + 0.5)
    axis.set_title(title)
    axis.set_xticks(x, [row["cell"].label for row in cells], rotation=75, fontsize="x-small", ha="right")
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="best", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _errors(values: Sequence[float], intervals: Sequence[tuple[float, float]]) -> np.ndarray:
    low = [max(0.0, v - lo) if np.isfinite(lo) else 0.0 for v, (lo, _) in zip(values, intervals)]
    high = [max(0.0, hi - v) if np.isfinite(hi) else 0.0 for v, (_, hi) in zip(values, intervals)]
    return np.array([low, high])
