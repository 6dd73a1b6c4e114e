"""Policy benchmark, part 2: cardflow vs easy-backfill over EVERY 4-day window of the Philly trace.

One 4-day window is a noisy judge of utilisation. Utilisation counts useful GPU-seconds inside the
window from the first to the last submission, and Philly's job sizes are heavy-tailed: whether one
64-GPU, 20-hour job starts a few hours earlier or later (a consequence of any difference in order)
moves a window's utilisation by a percent or two either way. So this part cuts the whole trace into
consecutive windows, sizes a V100 fleet for each (offered load ~100%, as in the headline case), runs
both policies on each, and pools the results: utilisation = useful GPU-hours / capacity GPU-hours
summed over all windows; wait percentiles over every core task of every window.

Used by bench/policies.py (see its docstring); not a script of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from shared.scheduling.model import PriorityClass
from shared.scheduling.policies import POLICIES
from shared.simulation.metrics import window
from shared.simulation.runner import Scenario, build_document, run_policies

COMPARED = ("cardflow", "easy-backfill")


@dataclass(frozen=True)
class WindowResult:
    """One window: its fleet, and per policy the utilisation and every core task's wait."""

    start: date
    jobs: int
    gpus: int
    offered_load: float
    capacity_gpu_h: float
    utilisation: dict[str, float]
    core_waits_s: dict[str, list[float]]


def window_starts(first: date, last: date, days: int) -> list[date]:
    """Consecutive window starts from `first` while the window begins before `last`."""
    starts, at = [], first
    while at < last:
        starts.append(at)
        at += timedelta(days=days)
    return starts


def run_window(scenario: Scenario, start: date, jobs: int, progress: Progress | None = None) -> WindowResult:
    """Both policies on one window's scenario."""
    outcomes = run_policies(scenario, [POLICIES[name] for name in COMPARED], jobs=jobs, progress=progress)
    document = build_document(scenario, outcomes)
    lo, hi = window(scenario.tasks)
    core = [task.task_id for task in scenario.tasks if task.priority_class == PriorityClass.CORE]
    waits = {name: [o.recorder.waits[t] for t in core if t in o.recorder.waits] for name, o in outcomes.items()}
    return WindowResult(
        start=start, jobs=len(scenario.tasks), gpus=scenario.cluster.capacity,
        offered_load=document["scenario"]["offered_load"],
        capacity_gpu_h=scenario.cluster.capacity * (hi - lo) / 3600,
        utilisation={name: document["policies"][name]["utilisation"] for name in COMPARED},
        core_waits_s=waits,
    )


def run_windows(starts: Sequence[date], build: Callable[[date], Scenario], jobs: int,
                console: Console) -> tuple[list[WindowResult], float]:
    """Every window in turn, with one progress bar over the windows."""
    started = time.perf_counter()
    results = []
    with Progress(console=console) as progress:
        bar = progress.add_task("Philly windows", total=len(starts))
        for start in starts:
            scenario = build(start)
            results.append(run_window(scenario, start, jobs))
            progress.advance(bar)
    return results, time.perf_counter() - started


def pooled(results: Sequence[WindowResult]) -> dict[str, dict[str, float]]:
    """Per policy: pooled utilisation, core wait mean/p95/p99 (minutes), windows won or tied."""
    capacity = sum(r.capacity_gpu_h for r in results)
    out = {}
    for name in COMPARED:
        waits = np.asarray([w for r in results for w in r.core_waits_s[name]], dtype=float) / 60
        others = [n for n in COMPARED if n != name]
        out[name] = {
            "utilisation": sum(r.utilisation[name] * r.capacity_gpu_h for r in results) / capacity,
            "core_wait_mean_min": float(waits.mean()) if len(waits) else 0.0,
            "core_wait_p95_min": float(np.percentile(waits, 95)) if len(waits) else 0.0,
            "core_wait_p99_min": float(np.percentile(waits, 99)) if len(waits) else 0.0,
            "windows_at_least_as_utilised": sum(
                all(r.utilisation[name] >= r.utilisation[o] - 0.0005 for o in others) for r in results),
        }
    return out


def _p95_min(values: list[float]) -> float:
    return float(np.percentile(values, 95)) / 60 if values else 0.0


def table(results: Sequence[WindowResult]) -> Table:
    """A rich table, one row per window, for the console."""
    view = Table(title="Philly, every 4-day window: cardflow vs easy-backfill")
    for column in ("window from", "jobs", "V100 GPUs", "load", "util cardflow", "util easy", "core p95 cardflow",
                   "core p95 easy"):
        view.add_column(column, justify="right")
    for row in markdown_rows(results):
        view.add_row(*row)
    return view


def markdown_rows(results: Sequence[WindowResult]) -> list[list[str]]:
    rows = []
    for r in results:
        rows.append([r.start.isoformat(), f"{r.jobs:,}", str(r.gpus), f"{r.offered_load:.0%}",
                     f"{r.utilisation['cardflow']:.1%}", f"{r.utilisation['easy-backfill']:.1%}",
                     f"{_p95_min(r.core_waits_s['cardflow']):,.0f}m", f"{_p95_min(r.core_waits_s['easy-backfill']):,.0f}m"])
    return rows


def verdict(summary: dict[str, dict[str, float]]) -> str:
    ours, theirs = summary["cardflow"], summary["easy-backfill"]
    wait_ok = ours["core_wait_p95_min"] < theirs["core_wait_p95_min"]
    util_ok = ours["utilisation"] >= theirs["utilisation"] - 0.0005
    return (f"pooled core p95 wait {ours['core_wait_p95_min']:,.0f} min vs {theirs['core_wait_p95_min']:,.0f} min "
            f"({'better' if wait_ok else 'NOT better'}); pooled utilisation {ours['utilisation']:.2%} vs "
            f"{theirs['utilisation']:.2%} ({'matches or beats' if util_ok else 'LOWER'}).")


def seed_rows(by_seed: dict[int, Sequence[WindowResult]]) -> list[list[str]]:
    """One row per synthesis seed: pooled utilisation and core p95 wait of both policies."""
    rows = []
    for seed, results in by_seed.items():
        summary = pooled(results)
        ours, theirs = summary["cardflow"], summary["easy-backfill"]
        rows.append([str(seed), f"{ours['utilisation']:.2%}", f"{theirs['utilisation']:.2%}",
                     f"{100 * (ours['utilisation'] - theirs['utilisation']):+.2f}",
                     f"{ours['core_wait_p95_min']:,.0f}m", f"{theirs['core_wait_p95_min']:,.0f}m"])
    return rows


SEED_HEADER = ["synthesis seed", "utilisation cardflow", "utilisation easy-backfill", "difference (points)",
               "core p95 wait cardflow", "core p95 wait easy-backfill"]


def seeds_table(by_seed: dict[int, Sequence[WindowResult]]) -> Table:
    view = Table(title="Philly, every window, pooled, per synthesis seed")
    for column in SEED_HEADER:
        view.add_column(column, justify="right")
    for row in seed_rows(by_seed):
        view.add_row(*row)
    return view


def seeds_verdict(by_seed: dict[int, Sequence[WindowResult]]) -> str:
    """Over all seeds: mean utilisation difference, and in how many seeds each goal holds."""
    summaries = [pooled(results) for results in by_seed.values()]
    diffs = [s["cardflow"]["utilisation"] - s["easy-backfill"]["utilisation"] for s in summaries]
    util_ok = sum(diff >= -0.0005 for diff in diffs)
    wait_ok = sum(s["cardflow"]["core_wait_p95_min"] < s["easy-backfill"]["core_wait_p95_min"] for s in summaries)
    return (f"over {len(summaries)} synthesis seeds, cardflow's pooled core p95 wait is lower in {wait_ok} of "
            f"{len(summaries)}; its pooled utilisation matches or beats easy-backfill's in {util_ok} of "
            f"{len(summaries)} (mean difference {100 * float(np.mean(diffs)):+.2f} points, from "
            f"{100 * min(diffs):+.2f} to {100 * max(diffs):+.2f}).")


def all_seeds_difference(by_seed: dict[int, Sequence[WindowResult]], resamples: int = 2000,
                         seed: int = 0) -> tuple[float, float, float]:
    """cardflow's pooled utilisation minus easy-backfill's over every (seed, window) pair, weighted by
    capacity, with a 95% bootstrap interval (the pairs resampled with replacement; fixed RNG seed)."""
    pairs = [(r.capacity_gpu_h, r.utilisation["cardflow"] - r.utilisation["easy-backfill"])
             for results in by_seed.values() for r in results]
    capacity = np.asarray([c for c, _ in pairs], dtype=float)
    diff = np.asarray([d for _, d in pairs], dtype=float)
    point = float((capacity * diff).sum() / capacity.sum())
    picks = np.random.default_rng(seed).integers(0, len(pairs), size=(resamples, len(pairs)))
    samples = (capacity[picks] * diff[picks]).sum(axis=1) / capacity[picks].sum(axis=1)
    low, high = np.percentile(samples, [2.5, 97.5])
    return point, float(low), float(high)


def all_seeds_line(by_seed: dict[int, Sequence[WindowResult]]) -> str:
    point, low, high = all_seeds_difference(by_seed)
    pairs = sum(len(results) for results in by_seed.values())
    return (f"Every seed and window together ({pairs} pairs): cardflow's utilisation minus easy-backfill's, "
            f"pooled, {100 * point:+.2f} points (95% bootstrap interval {100 * low:+.2f} to {100 * high:+.2f}).")


def section_lines(results: Sequence[WindowResult], elapsed_s: float, days: int,
                  by_seed: dict[int, Sequence[WindowResult]] | None = None) -> list[str]:
    """The Markdown of this part, inside the policies section of docs/BENCHMARKS.md."""
    summary = pooled(results)
    ours, theirs = summary["cardflow"], summary["easy-backfill"]
    diffs = [r.utilisation["cardflow"] - r.utilisation["easy-backfill"] for r in results]
    header = ["window from", "jobs", "V100 GPUs", "offered load", "utilisation cardflow", "utilisation easy-backfill",
              "core p95 wait cardflow", "core p95 wait easy-backfill"]
    lines = [
        f"### Philly, every {days}-day window (the whole trace)", "",
        f"- {len(results)} consecutive {days}-day windows from {results[0].start} ({sum(r.jobs for r in results):,} "
        "jobs; the few dozen sparse jobs before the first window are left out), each on its own V100 fleet sized "
        "like the headline case (offered load ~100%); cardflow and easy-backfill only; simulated (every seed below) in "
        f"{elapsed_s / 60:,.1f} min.",
        f"- Verdict with the default synthesis seed, pooled over all windows: {verdict(summary)} Core wait mean {ours['core_wait_mean_min']:,.0f} vs "
        f"{theirs['core_wait_mean_min']:,.0f} min, p99 {ours['core_wait_p99_min']:,.0f} vs "
        f"{theirs['core_wait_p99_min']:,.0f} min.",
        f"- Per window, cardflow's utilisation minus easy-backfill's: mean {np.mean(diffs):+.2%}, from "
        f"{min(diffs):+.2%} to {max(diffs):+.2%}; cardflow at least as high in "
        f"{ours['windows_at_least_as_utilised']} of {len(results)} windows; its core p95 wait is lower in "
        f"{sum(_p95_min(r.core_waits_s['cardflow']) < _p95_min(r.core_waits_s['easy-backfill']) for r in results)} "
        f"of {len(results)}. A single window swings by a percent or two with when a few huge jobs start, which "
        "is why the verdict is pooled.", "",
        "| " + " | ".join(header) + " |", "|" + "---:|" * len(header),
        *["| " + " | ".join(row) + " |" for row in markdown_rows(results)], "",
        f"![Philly, every {days}-day window](img/policies-philly-windows.png)", "",
    ]
    if by_seed and len(by_seed) > 1:
        lines += [
            "The synthesized fields (classes, estimates, data delays, checkpoints) are random draws, so the same "
            f"windows were run with other synthesis seeds too. Verdict: {seeds_verdict(by_seed)}", "",
            "| " + " | ".join(SEED_HEADER) + " |", "|" + "---:|" * len(SEED_HEADER),
            *["| " + " | ".join(row) + " |" for row in seed_rows(by_seed)], "",
            all_seeds_line(by_seed), "",
        ]
    return lines


def plot(results: Sequence[WindowResult], path: Path) -> None:
    """Per window: cardflow's utilisation minus easy-backfill's (points), and both policies' core p95
    wait (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r.start.strftime("%m-%d") for r in results]
    x = np.arange(len(results))
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 6), constrained_layout=True)
    gains = [100 * (r.utilisation["cardflow"] - r.utilisation["easy-backfill"]) for r in results]
    top.bar(x, gains, width=0.6, color=["tab:green" if gain >= 0 else "tab:red" for gain in gains])
    summary = pooled(results)
    top.axhline(100 * (summary["cardflow"]["utilisation"] - summary["easy-backfill"]["utilisation"]),
                color="black", linestyle="--", linewidth=1, label="pooled over all windows")
    top.axhline(0, color="grey", linewidth=0.5)
    top.set_ylabel("utilisation gain\n(points, cardflow − easy)")
    top.legend(loc="upper left", fontsize="small")
    top.set_title("Philly, every 4-day window (own fleet each, offered load ~100%)")
    for offset, name in ((-0.2, "cardflow"), (0.2, "easy-backfill")):
        bottom.bar(x + offset, [max(_p95_min(r.core_waits_s[name]), 0.1) for r in results], width=0.4, label=name)
    bottom.legend(loc="upper right", fontsize="small")
    bottom.set_yscale("log")
    bottom.set_ylabel("core p95 wait (min, log)")
    bottom.set_xticks(x, labels, rotation=60, fontsize="small")
    bottom.set_xlabel("window start (2017)")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def as_json(results: Sequence[WindowResult]) -> dict[str, Any]:
    """Per-window and pooled numbers, for --json-dir."""
    return {
        "windows": [{"start": r.start.isoformat(), "jobs": r.jobs, "gpus": r.gpus, "offered_load": r.offered_load,
                     "utilisation": r.utilisation,
                     "core_wait_p95_s": {n: _p95_min(w) * 60 for n, w in r.core_waits_s.items()}} for r in results],
        "pooled": pooled(results),
    }
