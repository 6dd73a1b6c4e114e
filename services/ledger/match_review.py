"""The match review (pure): was the card type a finished task ran on worth it, in hindsight?

For each succeeded task, the card type it ran on against the matcher's ranked alternatives:

- `ratio` = actual runtime / the estimate for the card it ran on (runtime = GPU-seconds / GPUs, so
  a grant spanning nodes is not counted twice; a preempted task's lost time is included);
- runtimes, GPU-hours and costs are in the agent's time: on a simulated agent (`time_scale` N, from
  `lease.granted`) the wall-clock figures x N, marked "simulated xN" (`clock_label`), so they compare
  with the matcher's nominal estimates; the ledger's billed figures stay wall-clock (`billed_cost`);
- `util_pct` = the run's mean GPU utilisation, time-weighted over the renewal intervals that reported
  it (`accounting.with_utilisation`); `util_coverage` = the share of its GPU-seconds those cover;
- each alternative's runtime and cost are *predicted* as its estimate x that same ratio (the task
  turned out `ratio` times as long as estimated; assume it would have everywhere);
- verdict: the first of `VERDICT_RULES` that applies (each a pure function of `Hindsight`), else
  `worth_it`:
  1. `mostly_idle` -> `oversized` — the GPUs averaged under `low_util_pct` busy over at least
     `min_util_coverage` of the run: a cheaper card (named when the ranking has one) or fewer GPUs
     would do;
  2. `cheaper_card_met_runtime` -> `oversized` — a cheaper alternative's predicted runtime is within
     `same_runtime_slack` of the actual one;
  3. `underestimated` -> `underestimated` — the task ran more than `underestimated_ratio` times its
     estimate.

`summarize_reviews` groups reviews by card type, project or profile, ranked by cost per output
unit, and `speed_corrections` reports the actual/estimated runtime ratio per (card type, profile):
a ratio of 1.3 says the catalog's speed factor for that pair is ~1.3x too optimistic.

A rule decides with a `ReviewReason` (its code and the numbers it looked at); the sentence, in
English or Chinese, is rendered from it by `services.ledger.review_reasons`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from services.ledger.review_reasons import ReviewReason, ReviewReasonCode, Verdict, reason_sentence, simulated_label


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
    util_pct: float | None = None  # mean GPU utilisation, time-weighted over the intervals that reported it
    util_coverage: float | None = None  # the share of its GPU-seconds those intervals cover (0..1)
    catalog_version: str | None = None
    time_scale: float = 1.0  # its agents' clock speed (GPU-second-weighted over its leases); 1 = real

    @property
    def wall_runtime_s(self) -> float:
        return float(self.gpu_seconds) / self.gpus

    @property
    def runtime_s(self) -> float:
        """The runtime in the agent's time (wall-clock x `time_scale`): what estimates compare with."""
        return self.wall_runtime_s * self.time_scale

    @property
    def run_gpu_seconds(self) -> Decimal:
        return self.gpu_seconds * _scale(self.time_scale)

    @property
    def run_cost(self) -> Decimal:
        """The cost at the agent's time (the billed cost x `time_scale`)."""
        return self.cost * _scale(self.time_scale)

    @property
    def simulated(self) -> bool:
        return self.time_scale != 1.0

    @property
    def clock_label(self) -> str | None:
        """"simulated x60" for a run on a scaled agent, None for a real one."""
        return simulated_label(self.time_scale) if self.simulated else None


def _scale(time_scale: float) -> Decimal:
    return Decimal(str(time_scale))


@dataclass(frozen=True, slots=True)
class ReviewThresholds:
    underestimated_ratio: float = 1.25
    low_util_pct: float = 40.0
    min_util_coverage: float = 0.5  # judge utilisation only when reports cover this share of the run
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
    why: ReviewReason
    est_runtime_s: float
    est_cost: float
    ratio: float
    alternatives: tuple[Alternative, ...]

    @property
    def reason(self) -> str:
        """Why the verdict, in English (`review_reasons.reason_sentence(review.why, "zh")` in Chinese)."""
        return reason_sentence(self.why, "en")

    @property
    def cost_per_output_unit(self) -> float | None:
        units = self.facts.output_units
        return float(self.facts.run_cost / units) if units else None


def review_match(facts: MatchFacts, thresholds: ReviewThresholds = ReviewThresholds()) -> MatchReview:
    """The verdict on one finished task (see the module docstring)."""
    estimate = _estimate_for(facts)
    ratio = facts.runtime_s / estimate.est_runtime_s
    cost = float(facts.run_cost)
    alternatives = tuple(
        _hindsight(option, ratio, facts.runtime_s * thresholds.same_runtime_slack, cost)
        for option in facts.ranking if option.card_type != facts.ran_on
    )  # fmt: skip
    verdict, why = _verdict(Hindsight(facts, ratio, estimate, alternatives, thresholds))
    return MatchReview(facts, verdict, why, estimate.est_runtime_s, estimate.est_cost, ratio, alternatives)


def _estimate_for(facts: MatchFacts) -> RankedCard:
    """The estimate for the card it ran on (the chosen card's when the ranking does not list it)."""
    by_card = {option.card_type: option for option in facts.ranking}
    return by_card.get(facts.ran_on) or by_card[facts.chosen]


def _hindsight(option: RankedCard, ratio: float, runtime_limit_s: float, actual_cost: float) -> Alternative:
    runtime, cost = option.est_runtime_s * ratio, option.est_cost * ratio
    return Alternative(option.card_type, option.est_runtime_s, option.est_cost, runtime, cost,
                       meets_runtime=runtime <= runtime_limit_s, cheaper=cost < actual_cost)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Hindsight:
    """What a verdict rule looks at: the facts, the runtime ratio, the estimate and the alternatives."""

    facts: MatchFacts
    ratio: float
    estimate: RankedCard
    alternatives: tuple[Alternative, ...]
    thresholds: ReviewThresholds

    def because(self, code: ReviewReasonCode, **facts: Any) -> ReviewReason:
        """The facts a rule decided on: the run's own, plus the rule's threshold or named card."""
        f = self.facts
        return ReviewReason(code, ran_on=f.ran_on, runtime_s=f.runtime_s, est_runtime_s=self.estimate.est_runtime_s,
                            ratio=self.ratio, cost=float(f.run_cost), time_scale=f.time_scale, util_pct=f.util_pct,
                            **facts)  # fmt: skip


VerdictRule = Callable[[Hindsight], tuple[Verdict, ReviewReason] | None]


def mostly_idle(h: Hindsight) -> tuple[Verdict, ReviewReason] | None:
    """Oversized: its GPUs averaged under `low_util_pct` busy, over enough of the run to tell."""
    facts, t = h.facts, h.thresholds
    if facts.util_pct is None or facts.util_pct >= t.low_util_pct or (facts.util_coverage or 0.0) < t.min_util_coverage:
        return None
    cheaper = sorted((a for a in h.alternatives if a.cheaper), key=lambda a: a.predicted_cost)
    named = {"card_type": cheaper[0].card_type, "card_runtime_s": cheaper[0].predicted_runtime_s,
             "card_cost": cheaper[0].predicted_cost} if cheaper else {}  # fmt: skip
    return Verdict.OVERSIZED, h.because(ReviewReasonCode.MOSTLY_IDLE, threshold=t.low_util_pct, **named)


def cheaper_card_met_runtime(h: Hindsight) -> tuple[Verdict, ReviewReason] | None:
    """Oversized: a cheaper alternative would have met the same runtime (its estimate x the ratio)."""
    better = sorted((a for a in h.alternatives if a.meets_runtime and a.cheaper), key=lambda a: a.predicted_cost)
    if not better:
        return None
    best = better[0]
    return Verdict.OVERSIZED, h.because(ReviewReasonCode.CHEAPER_CARD_MET_RUNTIME, card_type=best.card_type,
                                        card_runtime_s=best.predicted_runtime_s, card_cost=best.predicted_cost)  # fmt: skip


def underestimated(h: Hindsight) -> tuple[Verdict, ReviewReason] | None:
    """Underestimated: it ran much longer than estimated (the estimate, not the card, was off)."""
    if h.ratio <= h.thresholds.underestimated_ratio:
        return None
    return Verdict.UNDERESTIMATED, h.because(ReviewReasonCode.UNDERESTIMATED, threshold=h.thresholds.underestimated_ratio)


VERDICT_RULES: tuple[VerdictRule, ...] = (mostly_idle, cheaper_card_met_runtime, underestimated)
"""Tried in order; the first that applies gives the verdict (none: `worth_it`, reason `no_cheaper_card`)."""


def _verdict(h: Hindsight) -> tuple[Verdict, ReviewReason]:
    for rule in VERDICT_RULES:
        found = rule(h)
        if found is not None:
            return found
    return Verdict.WORTH_IT, h.because(ReviewReasonCode.NO_CHEAPER_CARD)


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
    cost = sum((r.facts.run_cost for r in members), Decimal(0))
    units = sum((r.facts.output_units or Decimal(0) for r in members), Decimal(0))
    unit_names = {r.facts.output_unit for r in members if r.facts.output_unit}
    return {
        "by": by.value, "key": key, "tasks": len(members),
        **{verdict.value: sum(1 for r in members if r.verdict is verdict) for verdict in Verdict},
        "gpu_hours": float(sum((r.facts.run_gpu_seconds for r in members), Decimal(0)) / 3600),
        "cost": float(cost), "output_units": float(units),
        "mean_util_pct": _mean_util(members), "simulated": _clock_of(members),
        "output_unit": unit_names.pop() if len(unit_names) == 1 else ("mixed" if unit_names else None),
        "cost_per_output_unit": float(cost / units) if units else None,
        "mean_runtime_ratio": statistics.fmean(r.ratio for r in members),
    }  # fmt: skip


def _mean_util(members: Sequence[MatchReview]) -> float | None:
    """The group's mean utilisation, weighted by each task's GPU-seconds with utilisation reported."""
    weighted = [(r.facts.util_pct, float(r.facts.gpu_seconds) * (r.facts.util_coverage or 0.0))
                for r in members if r.facts.util_pct is not None]  # fmt: skip
    total = sum(weight for _, weight in weighted)
    return sum(util * weight for util, weight in weighted) / total if total else None


def _clock_of(members: Sequence[MatchReview]) -> str | None:
    """"simulated x60" when figures of the group come from scaled agents (several scales: each)."""
    scales = sorted({r.facts.time_scale for r in members if r.facts.simulated})
    return ", ".join(simulated_label(scale) for scale in scales) or None


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
    """One review as JSON: runtimes, GPU-hours and `cost` in the agent's time (`simulated` says when
    they are wall-clock x `time_scale`); `billed_cost` / `wall_runtime_s` as the ledger has them."""
    facts = review.facts
    return {
        "task_id": facts.task_id, "name": facts.name, "project": facts.project, "profile": facts.profile,
        "scenario": facts.scenario, "gpus": facts.gpus, "chosen": facts.chosen, "ran_on": facts.ran_on,
        "catalog_version": facts.catalog_version,
        "est_runtime_s": review.est_runtime_s, "est_cost": review.est_cost, "runtime_s": facts.runtime_s,
        "wall_runtime_s": facts.wall_runtime_s, "time_scale": facts.time_scale, "simulated": facts.clock_label,
        "ratio": review.ratio, "gpu_hours": float(facts.run_gpu_seconds / 3600), "cost": float(facts.run_cost),
        "billed_cost": float(facts.cost),
        "output_units": float(facts.output_units) if facts.output_units is not None else None,
        "output_unit": facts.output_unit, "util_pct": facts.util_pct, "util_coverage": facts.util_coverage,
        "cost_per_output_unit": review.cost_per_output_unit,
        "verdict": review.verdict.value, "reason": review.reason, "reason_code": review.why.code.value,
        "reason_facts": review.why.facts_json(),
        "alternatives": [{name: getattr(a, name) for name in a.__slots__} for a in review.alternatives],
    }  # fmt: skip
