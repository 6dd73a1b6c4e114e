"""A round's report (pure): spend against output per task, project, scenario and card type;
estimate against actual; idle GPU-hours; preemption losses; the match review's summary; the trend.

    report = build_round_report(period, inputs)     # JSON-ready dict

What belongs to a round (the loader, `services.ledger.round_inputs.load_round_inputs`, selects it):

- spend: every usage increment *accounted* before the round's end (`to_at < ends_at`) that no earlier
  round counted, whole (each increment is marked with the round that counted it) — so consecutive
  rounds add up to the ledger's totals to the last digit, an increment the ledger applied only after
  its round had closed (a renewal or release read late) counts in the next round instead of in none,
  and a lease that runs over a round's end is charged up to its last renewal in the earlier round,
  the rest in the next;
- output: every output increment before the round's end that no earlier round counted (marked with
  the round, like the spend): a run's rise over what it had counted (a checkpoint, its success), a
  flagged success taking the run's counted output back (negative), a clearing counting it again — so
  a run reported in two rounds counts in each what it gained there, and the rounds' output adds up
  to the ledger's to the last digit; a group whose output is not positive has no cost per output unit;
- capacity: the GPUs of every registered node while it was alive during the round; idle = capacity
  minus the GPU time spent (never below 0, per card type);
- preemption losses: for leases that ended in the round by preemption, expiry, revocation or idle
  reclaim, the GPU time since their last checkpoint (or since the grant, without one) — work the
  task redoes — and its cost at the lease's price;
- flagged: successes the dispatcher flagged (issue 15: too early for the estimate, output out of
  bounds), not cleared, reported before the round's end and listed by no earlier round (marked with
  the round, like the increments) — the task, the flags and why, and the output held back
  (`ledger.flagged_output`): listed apart, counted in no total, group or cost per output unit;
- estimates: for tasks whose final output was reported before the round's end and that no earlier
  round reviewed (marked likewise: `task_output.finished_round_id`), the matcher's estimate for the card they ran on
  against what they took (the match review's ratio), in the agent's time: on a simulated agent
  (`time_scale` N) runtime and cost are the wall-clock figures x N, marked "simulated xN"; the spend
  sections stay the ledger's wall-clock figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from services.ledger.accounting import cost_of
from services.ledger.match_review import ReviewGrouping, MatchReview, Verdict, review_json, speed_corrections, summarize_reviews

GROUPINGS = ("task", "project", "scenario", "card")
NO_SCENARIO = "(none)"
_HOUR = Decimal(3600)


@dataclass(frozen=True, slots=True)
class RoundPeriod:
    round_id: str
    number: int
    starts_at: datetime
    ends_at: datetime


@dataclass(frozen=True, slots=True)
class SpendLine:
    """One usage increment accounted in the round."""

    lease_id: str
    task_id: str
    project: str
    card_type: str
    gpu_seconds: Decimal
    cost: Decimal


@dataclass(frozen=True, slots=True)
class RoundTask:
    task_id: str
    name: str
    project: str
    scenario: str | None
    output_unit: str | None


@dataclass(frozen=True, slots=True)
class OutputLine:
    """One output increment the round counted: what a run gained (or, flagged, lost) there."""

    task_id: str
    lease_id: str
    card_type: str
    output_units: Decimal


@dataclass(frozen=True, slots=True)
class NodeSpan:
    """A node's GPUs while alive within the round."""

    node_id: str
    card_type: str
    gpus: int
    seconds: Decimal


@dataclass(frozen=True, slots=True)
class LostRun:
    """GPU time a task redoes: a lease ended by preemption (etc.) after its last checkpoint."""

    lease_id: str
    task_id: str
    card_type: str
    reason: str
    gpus: int
    lost_seconds: Decimal
    price_per_gpu_hour: Decimal

    @property
    def gpu_seconds(self) -> Decimal:
        return self.gpus * self.lost_seconds

    @property
    def cost(self) -> Decimal:
        return cost_of(self.gpu_seconds, self.price_per_gpu_hour)


@dataclass
class RoundInputs:
    spend: list[SpendLine] = field(default_factory=list)
    tasks: dict[str, RoundTask] = field(default_factory=dict)
    outputs: list[OutputLine] = field(default_factory=list)
    capacity: list[NodeSpan] = field(default_factory=list)
    losses: list[LostRun] = field(default_factory=list)
    reviews: list[MatchReview] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    """Flagged successes (`rounds.load_flagged`): task_id, name, project, output_unit, lease_id, flags,
    detail, output_units (held back), claimed_output_units (refused), reported_at."""
    earlier: list[dict[str, Any]] = field(default_factory=list)
    """Totals of earlier rounds, oldest first: round_id, starts_at, ends_at, gpu_hours, cost, output_units."""


def build_round_report(period: RoundPeriod, inputs: RoundInputs) -> dict[str, Any]:
    """The report of `period` (see the module docstring), as JSON-ready values."""
    gpu_seconds = sum((line.gpu_seconds for line in inputs.spend), Decimal(0))
    cost = sum((line.cost for line in inputs.spend), Decimal(0))
    output = sum((line.output_units for line in inputs.outputs), Decimal(0))
    totals = {
        "gpu_seconds": float(gpu_seconds), "gpu_hours": float(gpu_seconds / _HOUR), "cost": float(cost),
        "output_units": float(output), "tasks": len({line.task_id for line in inputs.spend}),
        "leases": len({line.lease_id for line in inputs.spend}),
        **_idle_totals(inputs), **_loss_totals(inputs.losses), **_estimate_totals(inputs.reviews),
        **_flagged_totals(inputs.flagged),
    }  # fmt: skip
    return {
        "round_id": period.round_id, "number": period.number,
        "starts_at": period.starts_at.isoformat(), "ends_at": period.ends_at.isoformat(),
        "totals": totals,
        **{f"by_{grouping}": spend_rows(inputs, grouping) for grouping in GROUPINGS},
        "idle_by_card": idle_rows(inputs),
        "preemption_losses": [_loss_row(loss) for loss in inputs.losses],
        "estimates": [_estimate_row(review) for review in inputs.reviews],
        "flagged": [dict(run) for run in inputs.flagged],
        "review": review_summary(inputs.reviews),
        "trend": [*inputs.earlier, {"round_id": period.round_id, "starts_at": period.starts_at.isoformat(),
                                    "ends_at": period.ends_at.isoformat(), "gpu_hours": totals["gpu_hours"],
                                    "cost": totals["cost"], "output_units": totals["output_units"]}],
    }  # fmt: skip


# ---- spend against output ---------------------------------------------------------------------------


def spend_rows(inputs: RoundInputs, grouping: str) -> list[dict[str, Any]]:
    """Spend and output per `grouping` key, most expensive first."""
    key_of_task = _task_key(inputs, grouping)
    spend: dict[str, list[SpendLine]] = {}
    for line in inputs.spend:
        spend.setdefault(line.card_type if grouping == "card" else key_of_task(line.task_id), []).append(line)
    output: dict[str, list[OutputLine]] = {}
    for out in inputs.outputs:
        output.setdefault(out.card_type if grouping == "card" else key_of_task(out.task_id), []).append(out)
    rows = [_spend_row(inputs, grouping, key, spend.get(key, []), output.get(key, [])) for key in set(spend) | set(output)]
    return sorted(rows, key=lambda row: (-row["cost"], row["key"]))


def _task_key(inputs: RoundInputs, grouping: str) -> Callable[[str], str]:
    def key(task_id: str) -> str:
        task = inputs.tasks.get(task_id)
        if grouping == "task":
            return task_id
        if grouping == "project":
            return task.project if task else "unknown"
        return (task.scenario if task else None) or NO_SCENARIO

    return key


def _spend_row(inputs: RoundInputs, grouping: str, key: str, spend: Sequence[SpendLine],
               output: Sequence[OutputLine]) -> dict[str, Any]:  # fmt: skip
    cost = sum((line.cost for line in spend), Decimal(0))
    units = sum((line.output_units for line in output), Decimal(0))
    task_ids = {line.task_id for line in spend} | {line.task_id for line in output}
    unit_names = {inputs.tasks[t].output_unit for t in task_ids if t in inputs.tasks and inputs.tasks[t].output_unit}
    row = {
        "grouping": grouping, "key": key, "tasks": len(task_ids), "leases": len({line.lease_id for line in spend}),
        "gpu_hours": float(sum((line.gpu_seconds for line in spend), Decimal(0)) / _HOUR), "cost": float(cost),
        "output_units": float(units),
        "output_unit": unit_names.pop() if len(unit_names) == 1 else ("mixed" if unit_names else None),
        "cost_per_output_unit": float(cost / units) if units > 0 else None,
    }  # fmt: skip
    if grouping == "task":
        task = inputs.tasks.get(key)
        row |= {"name": task.name if task else None, "project": task.project if task else None,
                "scenario": task.scenario if task else None}  # fmt: skip
    return row


# ---- capacity, losses, estimates --------------------------------------------------------------------


def idle_rows(inputs: RoundInputs) -> list[dict[str, Any]]:
    capacity = _sum_by(inputs.capacity, lambda span: span.card_type, lambda span: span.gpus * span.seconds)
    busy = _sum_by(inputs.spend, lambda line: line.card_type, lambda line: line.gpu_seconds)
    return [
        {"card_type": card, "capacity_gpu_hours": float(capacity.get(card, 0) / _HOUR),
         "busy_gpu_hours": float(busy.get(card, 0) / _HOUR),
         "idle_gpu_hours": float(max(capacity.get(card, Decimal(0)) - busy.get(card, Decimal(0)), Decimal(0)) / _HOUR)}
        for card in sorted(set(capacity) | set(busy))
    ]  # fmt: skip


def _idle_totals(inputs: RoundInputs) -> dict[str, float | None]:
    rows = idle_rows(inputs)
    capacity = sum(row["capacity_gpu_hours"] for row in rows)
    busy = sum(row["busy_gpu_hours"] for row in rows)
    return {"capacity_gpu_hours": capacity, "idle_gpu_hours": sum(row["idle_gpu_hours"] for row in rows),
            "busy_share": busy / capacity if capacity else None}  # fmt: skip


def _loss_totals(losses: Sequence[LostRun]) -> dict[str, float]:
    return {
        "preemption_lost_gpu_hours": float(sum((loss.gpu_seconds for loss in losses), Decimal(0)) / _HOUR),
        "preemption_lost_cost": float(sum((loss.cost for loss in losses), Decimal(0))),
    }


def _loss_row(loss: LostRun) -> dict[str, Any]:
    return {"lease_id": loss.lease_id, "task_id": loss.task_id, "card_type": loss.card_type, "reason": loss.reason,
            "lost_gpu_hours": float(loss.gpu_seconds / _HOUR), "lost_cost": float(loss.cost)}  # fmt: skip


def _flagged_totals(flagged: Sequence[dict[str, Any]]) -> dict[str, float | int]:
    """How many flagged successes the round holds and the output held back from its totals."""
    return {"flagged_runs": len(flagged),
            "flagged_output_units": float(sum(Decimal(str(run["output_units"] or 0)) for run in flagged))}  # fmt: skip


def _estimate_totals(reviews: Sequence[MatchReview]) -> dict[str, float | None]:
    estimated = sum(review.est_cost for review in reviews)
    actual = float(sum((review.facts.run_cost for review in reviews), Decimal(0)))
    return {"finished_tasks": len(reviews), "estimated_cost": estimated, "actual_cost_finished": actual,
            "actual_over_estimated_cost": actual / estimated if estimated else None}  # fmt: skip


def _estimate_row(review: MatchReview) -> dict[str, Any]:
    facts = review.facts
    return {"task_id": facts.task_id, "name": facts.name, "card_type": facts.ran_on,
            "est_runtime_h": review.est_runtime_s / 3600, "runtime_h": facts.runtime_s / 3600, "ratio": review.ratio,
            "est_cost": review.est_cost, "cost": float(facts.run_cost), "util_pct": facts.util_pct,
            "simulated": facts.clock_label}  # fmt: skip


def review_summary(reviews: Sequence[MatchReview]) -> dict[str, Any]:
    return {
        "counts": {verdict.value: sum(1 for r in reviews if r.verdict is verdict) for verdict in Verdict},
        "by_card": summarize_reviews(reviews, ReviewGrouping.CARD),
        "speed_corrections": speed_corrections(reviews),
        "tasks": [review_json(review) for review in reviews],
    }


def _sum_by(items: Iterable[Any], key: Callable[[Any], str], value: Callable[[Any], Decimal]) -> dict[str, Decimal]:
    sums: dict[str, Decimal] = {}
    for item in items:
        sums[key(item)] = sums.get(key(item), Decimal(0)) + value(item)
    return sums
