"""The match review (pure): was the card type a finished task ran on worth it, in hindsight?

For each succeeded task, the card type it ran on against the matcher's ranked alternatives:

- `ratio` = actual runtime / the estimate for the card it ran on (runtime = GPU-seconds / GPUs, so
  a grant spanning nodes is not counted twice; a preempted task's lost time is included);
- each alternative's runtime and cost are *predicted* as its estimate x that same ratio (the task
  turned out `ratio` times as long as estimated; assume it would have everywhere);
- verdict, first that applies:
  1. `oversized` — the GPUs averaged under `low_util_pct` busy (when utilisation was reported), or
     a cheaper alternative's predicted runtime is within `same_runtime_slack` of the actual one;
  2. `underestimated` — the task ran more than `underestimated_ratio` times its estimate;
  3. `worth_it` — otherwise.

`summarize_reviews` groups reviews by card type, project or profile, ranked by cost per output
unit, and `speed_corrections` reports the actual/estimated runtime ratio per (card type, profile):
a ratio of 1.3 says the catalog's speed factor for that pair is ~1.3x too optimistic.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    WORTH_IT = "worth_it"  # the card it ran on was the right call
    OVERSIZED = "oversized"  # a smaller/cheaper card would have done (or its GPUs sat mostly idle)
    UNDERESTIMATED = "underestimated"  # it ran much longer than estimated: the estimate, not the card, was off


VERDICT_LABELS_ZH = {"worth_it": "值得", "oversized": "事后看过大", "underestimated": "低估"}


class ReviewGrouping(StrEnum):
    CARD = "card"
    PROJECT = "project"
    PROFILE = "profile"


@dataclass(frozen=True, slots=True)
class RankedCard:
    """One ranked card type of the task's match: the matcher's estimates."""

    card_type: str
    est_runtime_s: float
    est_cost: float


@dataclass(frozen=True, slots=True)
class MatchFacts:
    """What the ledger knows about a finished task: its match and what it really took."""

    task_id: str
    name: str
    project: str
    profile: str | None
    scenario: str | None
    gpus: int
    chosen: str
    ranking: tuple[RankedCard, ...]
    ran_on: str
    gpu_seconds: Decimal
    cost: Decimal
    output_units: Decimal | None
    output_unit: str | None = None
    util_pct: float | None = None
    catalog_version: str | None = None

    @property
    def runtime_s(self) -> float:
        return float(self.gpu_seconds) / self.gpus


@dataclass(frozen=True, slots=True)
class ReviewThresholds:
    underestimated_ratio: float = 1.25
    low_util_pct: float = 40.0
    same_runtime_slack: float = 1.05


@dataclass(frozen=True, slots=True)
class Alternative:
    """A card type it did not run on, with its estimate and what it would have taken in hindsight."""

    card_type: str
    est_runtime_s: float
    est_cost: float
    predicted_runtime_s: float
    predicted_cost: float
    meets_runtime: bool
    cheaper: bool


@dataclass(frozen=True, slots=True)
class MatchReview:
    facts: MatchFacts
    verdict: Verdict
    reason: str
    est_runtime_s: float
    est_cost: float
    ratio: float
    alternatives: tuple[Alternative, ...]

    @property
    def cost_per_output_unit(self) -> float | None:
        units = self.facts.output_units
        return float(self.facts.cost / units) if units else None


def review_match(facts: MatchFacts, thresholds: ReviewThresholds = ReviewThresholds()) -> MatchReview:
    """The verdict on one finished task (see the module docstring)."""
    estimate = _estimate_for(facts)
    ratio = facts.runtime_s / estimate.est_runtime_s
    cost = float(facts.cost)
    alternatives = tuple(
        _hindsight(option, ratio, facts.runtime_s * thresholds.same_runtime_slack, cost)
        for option in facts.ranking if option.card_type != facts.ran_on
    )  # fmt: skip
    verdict, reason = _verdict(facts, ratio, estimate, alternatives, thresholds)
    return MatchReview(facts, verdict, reason, estimate.est_runtime_s, estimate.est_cost, ratio, alternatives)


def _estimate_for(facts: MatchFacts) -> RankedCard:
    """The estimate for the card it ran on (the chosen card's when the ranking does not list it)."""
    by_card = {option.card_type: option for option in facts.ranking}
    return by_card.get(facts.ran_on) or by_card[facts.chosen]


def _hindsight(option: RankedCard, ratio: float, runtime_limit_s: float, actual_cost: float) -> Alternative:
    runtime, cost = option.est_runtime_s * ratio, option.est_cost * ratio
    return Alternative(option.card_type, option.est_runtime_s, option.est_cost, runtime, cost,
                       meets_runtime=runtime <= runtime_limit_s, cheaper=cost < actual_cost)  # fmt: skip


def _verdict(facts: MatchFacts, ratio: float, estimate: RankedCard, alternatives: Sequence[Alternative],
             t: ReviewThresholds) -> tuple[Verdict, str]:  # fmt: skip
    ran = f"{_h(facts.runtime_s)} on {facts.ran_on} ({ratio:.2f}x its estimate of {_h(estimate.est_runtime_s)})"
    if facts.util_pct is not None and facts.util_pct < t.low_util_pct:
        return Verdict.OVERSIZED, f"its GPUs were {facts.util_pct:.0f}% busy on average (under {t.low_util_pct:.0f}%); ran {ran}"
    better = sorted((a for a in alternatives if a.meets_runtime and a.cheaper), key=lambda a: a.predicted_cost)
    if better:
        best = better[0]
        return Verdict.OVERSIZED, (
            f"{best.card_type} would have taken about {_h(best.predicted_runtime_s)} (its estimate x {ratio:.2f})"
            f" for {best.predicted_cost:.2f} instead of {float(facts.cost):.2f}; ran {ran}"
        )
    if ratio > t.underestimated_ratio:
        return Verdict.UNDERESTIMATED, f"ran {ran}: more than {t.underestimated_ratio:g}x the estimate"
    busy = f", GPUs {facts.util_pct:.0f}% busy" if facts.util_pct is not None else ""
    return Verdict.WORTH_IT, f"ran {ran}{busy}; no cheaper card would have met that runtime"


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


# ---- summaries ------------------------------------------------------------------------------------


def group_key(review: MatchReview, by: ReviewGrouping) -> str:
    facts = review.facts
    if by is ReviewGrouping.CARD:
        return facts.ran_on
    if by is ReviewGrouping.PROJECT:
        return facts.project
    return facts.profile or "unknown"


def summarize_reviews(reviews: Iterable[MatchReview], by: ReviewGrouping) -> list[dict[str, Any]]:
    """Per group: tasks, verdicts, GPU-hours, cost, output, cost per output unit, mean ratio;
    cheapest output first (groups without output last)."""
    groups: dict[str, list[MatchReview]] = {}
    for review in reviews:
        groups.setdefault(group_key(review, by), []).append(review)
    rows = [_summary_row(by, key, members) for key, members in groups.items()]
    return sorted(rows, key=lambda r: (r["cost_per_output_unit"] is None, r["cost_per_output_unit"] or 0.0, r["key"]))


def _summary_row(by: ReviewGrouping, key: str, members: list[MatchReview]) -> dict[str, Any]:
    cost = sum((r.facts.cost for r in members), Decimal(0))
    units = sum((r.facts.output_units or Decimal(0) for r in members), Decimal(0))
    unit_names = {r.facts.output_unit for r in members if r.facts.output_unit}
    return {
        "by": by.value, "key": key, "tasks": len(members),
        **{verdict.value: sum(1 for r in members if r.verdict is verdict) for verdict in Verdict},
        "gpu_hours": float(sum((r.facts.gpu_seconds for r in members), Decimal(0)) / 3600),
        "cost": float(cost), "output_units": float(units),
        "output_unit": unit_names.pop() if len(unit_names) == 1 else ("mixed" if unit_names else None),
        "cost_per_output_unit": float(cost / units) if units else None,
        "mean_runtime_ratio": statistics.fmean(r.ratio for r in members),
    }  # fmt: skip


def speed_corrections(reviews: Iterable[MatchReview]) -> list[dict[str, Any]]:
    """Actual/estimated runtime per (card type, profile): the mean ratio, its spread and task count."""
    pairs: dict[tuple[str, str], list[float]] = {}
    for review in reviews:
        pairs.setdefault((review.facts.ran_on, review.facts.profile or "unknown"), []).append(review.ratio)
    return [
        {"card_type": card, "profile": profile, "tasks": len(ratios), "mean_ratio": statistics.fmean(ratios),
         "min_ratio": min(ratios), "max_ratio": max(ratios)}
        for (card, profile), ratios in sorted(pairs.items())
    ]  # fmt: skip


def review_json(review: MatchReview) -> dict[str, Any]:
    facts = review.facts
    return {
        "task_id": facts.task_id, "name": facts.name, "project": facts.project, "profile": facts.profile,
        "scenario": facts.scenario, "gpus": facts.gpus, "chosen": facts.chosen, "ran_on": facts.ran_on,
        "catalog_version": facts.catalog_version,
        "est_runtime_s": review.est_runtime_s, "est_cost": review.est_cost, "runtime_s": facts.runtime_s,
        "ratio": review.ratio, "gpu_hours": float(facts.gpu_seconds / 3600), "cost": float(facts.cost),
        "output_units": float(facts.output_units) if facts.output_units is not None else None,
        "output_unit": facts.output_unit, "util_pct": facts.util_pct,
        "cost_per_output_unit": review.cost_per_output_unit,
        "verdict": review.verdict.value, "reason": review.reason,
        "alternatives": [{name: getattr(a, name) for name in a.__slots__} for a in review.alternatives],
    }  # fmt: skip
