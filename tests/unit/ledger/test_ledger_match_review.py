"""The match review on a small hand-computed case: four finished tasks, one verdict each, with reasons,
group summaries ranked by cost per output unit, and the runtime ratio per card type and profile."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.ledger.match_review import (
    RankedCard,
    ReviewGrouping,
    MatchFacts,
    Verdict,
    review_match,
    speed_corrections,
    summarize_reviews,
)

# the matcher ranks by estimated cost: L40S first (2 h, 4.00), then H100 (1 h, 6.00)
COMPUTE_RANKING = (RankedCard("L40S", 7200.0, 4.0), RankedCard("H100", 3600.0, 6.0))
# a memory-bound task: A100 is estimated almost as fast as H100 for much less
MEMORY_RANKING = (RankedCard("A100", 3700.0, 3.5), RankedCard("H100", 3600.0, 6.0))


def facts(task_id: str, ran_on: str, gpu_seconds: int, cost: str, output: int, *, ranking=COMPUTE_RANKING,
          profile: str = "compute", util: float | None = None, project: str = "llm") -> MatchFacts:  # fmt: skip
    return MatchFacts(
        task_id=task_id, name=task_id, project=project, profile=profile, scenario=None, gpus=1,
        chosen=ranking[0].card_type, ranking=ranking, ran_on=ran_on, gpu_seconds=Decimal(gpu_seconds),
        cost=Decimal(cost), output_units=Decimal(output), output_unit="samples", util_pct=util,
    )  # fmt: skip


A = facts("A", "L40S", 7200, "4.00", 1000)  # exactly as estimated on the cheapest card
B = facts("B", "H100", 3600, "6.00", 1000, ranking=MEMORY_RANKING, profile="memory", project="vision")  # A100 was busy
C = facts("C", "L40S", 7200, "4.00", 1000, util=22.0)  # on time, but its GPU sat mostly idle
D = facts("D", "L40S", 10800, "6.00", 1000)  # took 3 h instead of 2


def test_each_task_gets_its_hand_computed_verdict_and_reason() -> None:
    a, b, c, d = (review_match(f) for f in (A, B, C, D))

    assert (a.verdict, a.ratio, a.cost_per_output_unit) == (Verdict.WORTH_IT, 1.0, 0.004)
    (h100,) = a.alternatives
    assert (h100.predicted_runtime_s, h100.predicted_cost, h100.meets_runtime, h100.cheaper) == (3600.0, 6.0, True, False)
    assert "no cheaper card would have met that runtime" in a.reason

    assert b.verdict is Verdict.OVERSIZED and b.ratio == 1.0
    (a100,) = b.alternatives  # 3700 s <= 3600 s x 1.05, and 3.50 < 6.00
    assert (a100.predicted_runtime_s, a100.predicted_cost, a100.meets_runtime, a100.cheaper) == (3700.0, 3.5, True, True)
    assert b.reason.startswith("A100 would have taken about 1.03 h (its estimate x 1.00) for 3.50 instead of 6.00")

    assert c.verdict is Verdict.OVERSIZED and c.reason.startswith("its GPUs were 22% busy on average (under 40%)")

    assert d.verdict is Verdict.UNDERESTIMATED and d.ratio == 1.5
    (h100,) = d.alternatives  # 1 h x 1.5 = 1.5 h for 9.00: faster, but not cheaper than 6.00
    assert (h100.predicted_runtime_s, h100.predicted_cost, h100.cheaper) == (5400.0, 9.0, False)
    assert d.reason == "ran 3.00 h on L40S (1.50x its estimate of 2.00 h): more than 1.25x the estimate"


def test_summaries_rank_groups_by_cost_per_output_unit() -> None:
    reviews = [review_match(f) for f in (A, B, C, D)]
    by_card = summarize_reviews(reviews, ReviewGrouping.CARD)
    assert [(r["key"], r["tasks"], r["cost"], r["output_units"]) for r in by_card] == [
        ("L40S", 3, 14.0, 3000.0),  # 14 / 3000 = 0.00467 per sample
        ("H100", 1, 6.0, 1000.0),  # 0.006 per sample
    ]
    l40s = by_card[0]
    assert (l40s["worth_it"], l40s["oversized"], l40s["underestimated"]) == (1, 1, 1)
    assert l40s["cost_per_output_unit"] == pytest.approx(14 / 3000)
    assert l40s["mean_runtime_ratio"] == pytest.approx((1.0 + 1.0 + 1.5) / 3)
    assert [r["key"] for r in summarize_reviews(reviews, ReviewGrouping.PROJECT)] == ["llm", "vision"]


def test_the_runtime_ratio_per_card_and_profile_says_which_speed_factor_is_off() -> None:
    corrections = speed_corrections(review_match(f) for f in (A, B, C, D))
    assert [(r["card_type"], r["profile"], r["tasks"], round(r["mean_ratio"], 4)) for r in corrections] == [
        ("H100", "memory", 1, 1.0),
        ("L40S", "compute", 3, round(3.5 / 3, 4)),
    ]

