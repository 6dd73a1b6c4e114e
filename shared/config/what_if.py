"""What-if (pure): replay this installation's recent workload under the current and a proposed policy.

    tasks, fleet = workload_tasks(workload, catalog)       # from GET /v1/workload?days=N
    current = replay(tasks, fleet, current_policy, catalog)
    proposed = replay(tasks, fleet, proposed_policy, catalog)
    rows = compare(current, proposed); print(verdict(rows, days))

The replay is the simulator (`shared.simulation`), which runs the same `plan()` as the dispatcher.
Each task arrives when it arrived, becomes ready when its data became ready, and runs for as
long as it really held GPUs (converted from the card it ran on to the catalog's reference card);
a task that never ran runs for its estimate. Quotas are not replayed (both sides alike).
Deterministic: the same inputs give the same numbers, so a policy that decides alike shows no
difference at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.cards import Catalog, scale_runtime_s
from shared.scheduling.model import PriorityClass, Profile
from shared.scheduling.policy_knobs import Policy
from shared.simulation.cluster import Cluster, ClusterNode
from shared.simulation.engine import Simulation
from shared.simulation.matching import CatalogCardModel
from shared.simulation.metrics import summarize
from shared.simulation.workload import SimTask

CLASSES = tuple(c.value for c in PriorityClass)


def workload_tasks(workload: Mapping[str, Any], catalog: Catalog) -> tuple[list[SimTask], Cluster]:
    """The simulator's tasks and fleet from the workload the API returns."""
    tasks = [_sim_task(row, catalog) for row in workload["tasks"]]
    nodes = tuple(ClusterNode(n["node_id"], n["card_type"], int(n["gpus"])) for n in workload["nodes"])
    return tasks, Cluster(nodes, "this installation's fleet")


def _sim_task(row: Mapping[str, Any], catalog: Catalog) -> SimTask:
    profile, gpus, reference = Profile(row["profile"]), int(row["gpus"]), catalog.reference
    estimate_s = float(row["estimate_gpu_hours"]) * 3600.0 / gpus
    ran, run_s = row.get("ran_card"), row.get("run_s")
    if run_s and ran in catalog:
        duration_s = scale_runtime_s(float(run_s), ran, reference, profile, catalog)
    else:
        duration_s = float(run_s) if run_s else estimate_s
    submit_s = _epoch(row["submitted_at"])
    allowed = tuple(row.get("allow") or ()) or tuple(c for c in catalog.names if c not in set(row.get("deny") or ()))
    return SimTask(
        task_id=row["task_id"], submit_s=submit_s, gpus=gpus, duration_s=max(duration_s, 1.0), estimate_s=estimate_s,
        priority_class=PriorityClass(row["priority_class"]), priority=int(row.get("priority") or 0),
        project=row["project"], card_types=allowed if row.get("allow") or row.get("deny") else (),
        trace_card=reference, min_vram_gb=float(row.get("min_vram_gb") or 0.0),
        ready_s=max(submit_s, _epoch(row["ready_at"])) if row.get("ready_at") else submit_s,
        checkpoint_interval_s=row.get("checkpoint_interval_s"), profile=profile, heavy=bool(row.get("heavy")),
    )  # fmt: skip


def replay(tasks: list[SimTask], fleet: Cluster, policy: Policy, catalog: Catalog,
           progress: Callable[[int, float], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """The simulator's summary of `tasks` on `fleet` under `policy` (see `shared.simulation.metrics`)."""
    simulation = Simulation(tasks, fleet, policy, card_model=CatalogCardModel(catalog=catalog))
    outcome = simulation.run(progress)
    return summarize(outcome.recorder, list(outcome.tasks), fleet.capacity, outcome.unfinished)


@dataclass(frozen=True, slots=True)
class Delta:
    """One measure side by side: current, proposed, and whether lower is better."""

    measure: str
    current: float
    proposed: float
    unit: str
    lower_is_better: bool

    @property
    def change(self) -> float:
        return self.proposed - self.current

    @property
    def better(self) -> bool | None:
        """True/False when the proposal is better/worse on this measure; None when equal."""
        if abs(self.change) < 1e-9:
            return None
        return (self.change < 0) == self.lower_is_better


def compare(current: Mapping[str, Any], proposed: Mapping[str, Any]) -> list[Delta]:
    """Utilisation, wait per class (mean and p95), cost, preemptions, lost GPU-hours, deferral reasons."""
    rows = [Delta("utilisation", current["utilisation"] * 100, proposed["utilisation"] * 100, "%", False)]
    for name in CLASSES:
        for stat in ("mean", "p95"):
            rows.append(Delta(f"wait {name} {stat}", _wait(current, name, stat), _wait(proposed, name, stat), "min", True))
    rows += [
        Delta("cost", current["cost"], proposed["cost"], "", True),
        Delta("preemptions", current["preemptions"], proposed["preemptions"], "", True),
        Delta("lost GPU-hours", current["lost_gpu_hours"], proposed["lost_gpu_hours"], "h", True),
        Delta("completed", current["completed"], proposed["completed"], "", False),
    ]
    for reason in sorted(set(current["deferrals"]) | set(proposed["deferrals"])):
        rows.append(Delta(f"deferred: {reason}", current["deferrals"].get(reason, 0), proposed["deferrals"].get(reason, 0),
                          "tasks", True))  # fmt: skip
    return rows


def gains_and_losses(rows: list[Delta]) -> tuple[list[Delta], list[Delta]]:
    """The measures the verdict names, at most three each: better under the proposal, and worse
    (deferral counts are left out: they explain waits, they are not a goal)."""
    changed = [row for row in rows if row.better is not None and not row.measure.startswith("deferred")]
    return [row for row in changed if row.better][:3], [row for row in changed if not row.better][:3]


def verdict(rows: list[Delta], days: float, tasks: int) -> str:
    """One plain sentence: no difference, or the biggest gains and losses."""
    better, worse = gains_and_losses(rows)
    if not better and not worse:
        return (f"No difference: over the last {days:g} days ({tasks} tasks) the proposal would have made the same "
                "decisions as the policy in force.")  # fmt: skip
    gains = [_phrase(row) for row in better]
    losses = [_phrase(row) for row in worse]
    parts = []
    if gains:
        parts.append("better: " + ", ".join(gains[:3]))
    if losses:
        parts.append("worse: " + ", ".join(losses[:3]))
    return f"Over the last {days:g} days ({tasks} tasks) the proposal would be " + "; ".join(parts) + "."


def _phrase(row: Delta) -> str:
    unit = f" {row.unit}" if row.unit and row.unit != "%" else ("%" if row.unit == "%" else "")
    return f"{row.measure} {row.current:.3g}{unit} → {row.proposed:.3g}{unit}"


def _wait(summary: Mapping[str, Any], name: str, stat: str) -> float:
    return summary["wait_s"].get(name, {}).get(stat, 0.0) / 60.0


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()
