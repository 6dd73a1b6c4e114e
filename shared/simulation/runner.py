"""Prepare a scenario (trace + fleet + quotas + card model) and run several policies on it.

This is what `cardflow simulate` and `bench/policies.py` call: `prepare_scenario(...)`, then
`run_policies(...)`, then `build_document(...)` for the JSON shape documented in docs/simulation.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from shared.scheduling.model import Policy, QuotaAccount
from shared.simulation.cardmodel import CardModel
from shared.simulation.cluster import Cluster, nodes_from_rows, size_for_load
from shared.simulation.engine import Outcome, PlanFn, Simulation
from shared.simulation.metrics import demand_bound, summarize, window
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
    demand = sum(t.gpus * max(0.0, min(t.duration_s, hi - max(t.ready_s, lo))) for t in tasks)
    widest = max(t.gpus for t in tasks)
    return size_for_load(demand, hi - lo, card, DEFAULT_GPUS_PER_NODE,
                         min_nodes=-(-widest // DEFAULT_GPUS_PER_NODE))


def dominant_card(trace: Trace, fallback: str) -> str:
    """The card most durations were measured on (or `fallback`)."""
    cards = Counter(task.trace_card for task in trace.tasks if task.trace_card)
    return cards.most_common(1)[0][0] if cards else fallback


def prepare_scenario(trace: Trace, card_model: CardModel, *, cluster: Cluster | None = None,
                     synthesize_seed: int | None = None, params: SynthesisParams | None = None,
                     quota_csv: Path | None = None, limit: int | None = None,
                     fallback_card: str = "A100-80G") -> Scenario:
    """Limit, synthesize (if asked), resolve defaults, pick the fleet and quota accounts."""
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
    elif synthesize_seed is not None:
        quotas = synthesize_quotas(tasks, params)
    else:
        quotas = {}
    return Scenario(trace, tasks, fleet, card_model, quotas)


def run_policies(scenario: Scenario, policies: Sequence[Policy], *, plan_fn: PlanFn | None = None,
                 progress: Progress | None = None) -> dict[str, Outcome]:
    """Run each policy on the scenario (one rich progress bar each when `progress` is given)."""
    outcomes: dict[str, Outcome] = {}
    for policy in policies:
        simulation = Simulation(scenario.tasks, scenario.cluster, policy, plan_fn=plan_fn,
                                card_model=scenario.card_model, quotas=scenario.quotas)
        if progress is None:
            outcomes[policy.name] = simulation.run()
            continue
        bar = progress.add_task(policy.name, total=len(scenario.tasks))
        outcomes[policy.name] = simulation.run(lambda done, now, bar=bar: progress.update(bar, completed=done))
        progress.update(bar, completed=len(scenario.tasks))
    return outcomes


def new_progress() -> Progress:
    """The progress display used by the CLI and the benchmark."""
    return Progress(TextColumn("[bold]{task.description:>14}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("tasks done"), TimeElapsedColumn())


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
