"""Prepare a scenario (trace + fleet + quotas + card model) and run several policies on it.

This is what `cardflow simulate` and `bench/policies.py` call: `prepare_scenario(...)`, then
`run_policies(...)`, then `build_document(...)` for the JSON shape documented in docs/simulation.md.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from shared.scheduling.model import QuotaAccount
from shared.scheduling.policy_knobs import Policy
from shared.simulation.cardmodel import CardModel
from shared.simulation.cluster import Cluster, nodes_from_rows, size_for_load
from shared.simulation.engine import Outcome, PlanFn, Simulation
from shared.simulation.metrics import demand_bound, demand_gpu_s, summarize, window
from shared.simulation.quotas import load_quota_csv, synthesize_quotas
from shared.simulation.synthesize import SynthesisParams, synthesize
from shared.simulation.workload import SimTask, Trace, limit_tasks, resolve

DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Scenario:
    """Everything a policy run needs, identical for every policy compared."""

    trace: Trace
    tasks: tuple[SimTask, ...]
    cluster: Cluster
    card_model: CardModel
    quotas: Mapping[str, QuotaAccount] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        lo, hi = window(self.tasks)
        return {
            "tasks": len(self.tasks),
            "window_s": hi - lo,
            "capacity_gpus": self.cluster.capacity,
            "offered_load": demand_bound(self.tasks, self.cluster.capacity, lo, hi),
            "quota_accounts": len(self.quotas),
        }


def default_cluster(trace: Trace, tasks: Sequence[SimTask], card: str) -> Cluster:
    """The trace's own node list if it has one, else `card` nodes of 8 GPUs sized for 100% offered load."""
    if trace.cluster_nodes:
        return nodes_from_rows(trace.cluster_nodes, f"{trace.name} node list")
    lo, hi = window(tasks)
    demand = demand_gpu_s(tasks, lo, hi)
    widest = max(t.gpus for t in tasks)
    return size_for_load(demand, hi - lo, card, DEFAULT_GPUS_PER_NODE,
                         min_nodes=-(-widest // DEFAULT_GPUS_PER_NODE))


def dominant_card(trace: Trace, fallback: str) -> str:
    """The card most durations were measured on (or `fallback`)."""
    cards = Counter(task.trace_card for task in trace.tasks if task.trace_card)
    return cards.most_common(1)[0][0] if cards else fallback


def prepare_scenario(trace: Trace, card_model: CardModel, *, cluster: Cluster | None = None,
                     synthesize_seed: int | None = None, params: SynthesisParams | None = None,
                     quota_csv: Path | None = None, synthesize_quota: bool = False, limit: int | None = None,
                     fallback_card: str = "A100-80G") -> Scenario:
    """Limit, synthesize (if asked), resolve defaults, pick the fleet and quota accounts (from the CSV,
    or synthesized when `synthesize_quota`, else none)."""
    trace = trace.with_tasks(limit_tasks(trace.tasks, limit))
    if not trace.tasks:
        raise ValueError(f"trace {trace.name} has no task to simulate")
    params = params or SynthesisParams()
    if synthesize_seed is not None:
        trace = synthesize(trace, synthesize_seed, params)
    tasks = tuple(resolve(task) for task in trace.tasks)
    fleet = cluster or default_cluster(trace, tasks, dominant_card(trace, fallback_card))
    if quota_csv is not None:
        quotas: Mapping[str, QuotaAccount] = load_quota_csv(quota_csv)
    elif synthesize_quota:
        quotas = synthesize_quotas(tasks, params)
    else:
        quotas = {}
    return Scenario(trace, tasks, fleet, card_model, quotas)


def run_policies(scenario: Scenario, policies: Sequence[Policy], *, plan_fn: PlanFn | None = None,
                 progress: Progress | None = None, jobs: int = 1) -> dict[str, Outcome]:
    """Run each policy on the scenario (one rich progress bar each when `progress` is given);
    `jobs` > 1 runs policies in that many worker processes (the production plan only)."""
    bars = {p.name: progress.add_task(p.name, total=len(scenario.tasks)) for p in policies} if progress else {}
    if jobs > 1 and len(policies) > 1 and plan_fn is None:
        return _run_in_processes(scenario, policies, jobs, progress, bars)
    outcomes: dict[str, Outcome] = {}
    for policy in policies:
        report = _reporter(progress, bars.get(policy.name))
        outcomes[policy.name] = simulate_policy(scenario, policy, plan_fn, report)
        if progress is not None:
            progress.update(bars[policy.name], completed=len(scenario.tasks))
    return outcomes


def simulate_policy(scenario: Scenario, policy: Policy, plan_fn: PlanFn | None = None,
                    report: Callable[[int, float], None] | None = None) -> Outcome:
    """One policy on the scenario (the production plan unless `plan_fn`), reporting progress."""
    simulation = Simulation(scenario.tasks, scenario.cluster, policy, plan_fn=plan_fn,
                            card_model=scenario.card_model, quotas=scenario.quotas)
    return simulation.run(report)


def _reporter(progress: Progress | None, bar: TaskID | None) -> Callable[[int, float], None] | None:
    if progress is None or bar is None:
        return None
    return lambda done, _now: progress.update(bar, completed=done)


def _worker(scenario: Scenario, policy: Policy, updates: Any) -> Outcome:
    return simulate_policy(scenario, policy, None, lambda done, _now: updates.put((policy.name, done)))


def _run_in_processes(scenario: Scenario, policies: Sequence[Policy], jobs: int, progress: Progress | None,
                      bars: dict[str, TaskID]) -> dict[str, Outcome]:
    """Policies in parallel worker processes; progress flows back through a managed queue."""
    with multiprocessing.Manager() as manager, ProcessPoolExecutor(max_workers=jobs) as pool:
        updates = manager.Queue()
        futures = {p.name: pool.submit(_worker, scenario, p, updates) for p in policies}
        while not all(future.done() for future in futures.values()):
            _drain(updates, progress, bars, timeout=0.2)
        _drain(updates, progress, bars, timeout=0.0)
        outcomes = {name: future.result() for name, future in futures.items()}
    if progress is not None:
        for bar in bars.values():
            progress.update(bar, completed=len(scenario.tasks))
    return outcomes


def _drain(updates: Any, progress: Progress | None, bars: dict[str, TaskID], timeout: float) -> None:
    try:
        name, done = updates.get(timeout=timeout) if timeout else updates.get_nowait()
    except queue.Empty:
        return
    while True:
        if progress is not None:
            progress.update(bars[name], completed=done)
        try:
            name, done = updates.get_nowait()
        except queue.Empty:
            return


def new_progress(done_label: str = "tasks done") -> Progress:
    """The progress display used by the CLI (`done_label` in its language) and the benchmark."""
    return Progress(TextColumn("[bold]{task.description:>14}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn(done_label), TimeElapsedColumn())


def build_document(scenario: Scenario, outcomes: Mapping[str, Outcome]) -> dict[str, Any]:
    """The JSON report: {"trace", "cluster", "policies": {NAME: {...}}, plus context keys}."""
    policies = {
        name: {**summarize(o.recorder, list(o.tasks), scenario.cluster.capacity, o.unfinished),
               "unplaceable": len(o.unplaceable)}
        for name, o in outcomes.items()
    }
    return {
        "trace": scenario.trace.name,
        "cluster": scenario.cluster.description,
        "policies": policies,
        "fleet": scenario.cluster.summary(),
        "scenario": scenario.describe(),
        "trace_notes": {k: v for k, v in scenario.trace.notes.items() if k != "synthesis"},
        "synthesis": scenario.trace.notes.get("synthesis"),
    }
