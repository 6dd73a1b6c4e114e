"""The match review on a small hand-computed case: four finished tasks, one verdict each, with reasons,
group summaries ranked by cost per output unit, and the runtime ratio per card type and profile."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.ledger.match_review import (
    VERDICT_RULES,
    Hindsight,
    RankedCard,
    ReviewGrouping,
    ReviewThresholds,
    MatchFacts,
    Verdict,
    review_json,
    review_match,
    speed_corrections,
    summarize_reviews,
)

# the matcher ranks by estimated cost: L40S first (2 h, 4.00), then H100 (1 h, 6.00)
COMPUTE_RANKING = (RankedCard("L40S", 7200.0, 4.0), RankedCard("H100", 3600.0, 6.0))
# a memory-bound task: A100 is estimated almost as fast as H100 for much less
MEMORY_RANKING = (RankedCard("A100", 3700.0, 3.5), RankedCard("H100", 3600.0, 6.0))


def facts(task_id: str, ran_on: str, gpu_seconds: float, cost: str, output: int, *, ranking=COMPUTE_RANKING,
          profile: str = "compute", util: float | None = None, coverage: float | None = None, project: str = "llm",
          time_scale: float = 1.0) -> MatchFacts:  # fmt: skip
    return MatchFacts(
        task_id=task_id, name=task_id, project=project, profile=profile, scenario=None, gpus=1,
        chosen=ranking[0].card_type, ranking=ranking, ran_on=ran_on, gpu_seconds=Decimal(str(gpu_seconds)),
        cost=Decimal(cost), output_units=Decimal(output), output_unit="samples", util_pct=util,
        util_coverage=coverage if coverage is not None else (1.0 if util is not None else None), time_scale=time_scale,
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

    assert c.verdict is Verdict.OVERSIZED and c.reason == (
        "its GPUs were 22% busy on average (time-weighted, under 40%); fewer or smaller GPUs would likely do;"
        " ran 2.00 h on L40S (1.00x its estimate of 2.00 h)")

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



# ---- the verdict rules, one table: (facts, the rule that decides, verdict, a piece of the reason) ----------

RULE_CASES = [
    # busy on the cheapest card, as estimated: no rule applies
    (facts("busy", "L40S", 7200, "4.00", 1, util=85.0), None, Verdict.WORTH_IT, "GPUs 85% busy"),
    # 30% busy on H100 over the whole run; L40S is cheaper: named
    (facts("idle-h100", "H100", 3600, "6.00", 1, util=30.0), "mostly_idle", Verdict.OVERSIZED,
     "a cheaper card would likely do: L40S (about 4.00 instead of 6.00)"),
    # 30% busy, but reported over only 40% of the run: too little to tell; as estimated, so worth it
    (facts("thin", "L40S", 7200, "4.00", 1, util=30.0, coverage=0.4), None, Verdict.WORTH_IT, "GPUs 30% busy"),
    # exactly at the threshold is not under it
    (facts("edge", "L40S", 7200, "4.00", 1, util=40.0), None, Verdict.WORTH_IT, "GPUs 40% busy"),
    # idle beats underestimated: 10% busy and 1.5x the estimate
    (facts("idle-slow", "L40S", 10800, "6.00", 1, util=10.0), "mostly_idle", Verdict.OVERSIZED,
     "fewer or smaller GPUs would likely do"),
    # busy, but A100 would have met the runtime for less
    (facts("mem", "H100", 3600, "6.00", 1, ranking=MEMORY_RANKING, util=90.0), "cheaper_card_met_runtime",
     Verdict.OVERSIZED, "A100 would have taken about 1.03 h"),
    # no utilisation reported, 1.5x the estimate
    (facts("slow", "L40S", 10800, "6.00", 1), "underestimated", Verdict.UNDERESTIMATED, "more than 1.25x"),
]


@pytest.mark.parametrize(("case", "rule", "verdict", "said"), RULE_CASES, ids=[c[0].task_id for c in RULE_CASES])
def test_each_verdict_rule_on_its_table_row(case: MatchFacts, rule: str | None, verdict: Verdict, said: str) -> None:
    review = review_match(case)
    estimate = next(o for o in case.ranking if o.card_type == case.ran_on)
    h = Hindsight(case, review.ratio, estimate, review.alternatives, ReviewThresholds())
    deciding = next((r.__name__ for r in VERDICT_RULES if r(h) is not None), None)
    assert (deciding, review.verdict) == (rule, verdict)
    assert said in review.reason, review.reason


def test_a_simulated_run_is_judged_in_the_agents_time_and_says_so() -> None:
    # 2 h of L40S work on a x60 agent took 120 s of wall clock and was billed 4.00 / 60
    sim = facts("sim", "L40S", 120, "0.066667", 1000, time_scale=60.0, util=80.0)
    review = review_match(sim)
    assert sim.runtime_s == pytest.approx(7200.0) and sim.wall_runtime_s == 120.0
    assert review.ratio == pytest.approx(1.0) and review.verdict is Verdict.WORTH_IT
    assert review.reason.startswith("ran 2.00 h (simulated ×60) on L40S (1.00x its estimate of 2.00 h)")
    shown = review_json(review)
    assert (shown["simulated"], shown["time_scale"], shown["runtime_s"], shown["wall_runtime_s"]) == (
        "simulated ×60", 60.0, pytest.approx(7200.0), 120.0)
    assert shown["cost"] == pytest.approx(4.00002) and shown["billed_cost"] == 0.066667
    (group,) = summarize_reviews([review], ReviewGrouping.CARD)
    assert group["simulated"] == "simulated ×60" and group["gpu_hours"] == pytest.approx(2.0)
    assert group["mean_util_pct"] == 80.0
    real = review_json(review_match(A))
    assert (real["simulated"], real["runtime_s"]) == (None, 7200.0)


def test_a_groups_mean_utilisation_is_weighted_by_the_reported_gpu_seconds() -> None:
    one = facts("one", "L40S", 7200, "4.00", 1, util=20.0)  # 7,200 GPU-s reported
    two = facts("two", "L40S", 3600, "2.00", 1, util=80.0, coverage=0.5)  # 1,800 GPU-s reported
    three = facts("three", "L40S", 3600, "2.00", 1)  # none
    (group,) = summarize_reviews([review_match(f) for f in (one, two, three)], ReviewGrouping.CARD)
    assert group["mean_util_pct"] == pytest.approx((20 * 7200 + 80 * 1800) / 9000)
    assert group["simulated"] is None
