"""Card matching: runtime scaling, ranking by cost, oversized choices, allow/deny, unmatchable tasks."""

from __future__ import annotations

import math

import pytest

from shared.cards import (
    MatchRequest,
    estimate_runtime_s,
    load_catalog,
    parse_catalog,
    rank_cards,
    relative_speed,
    scale_runtime_s,
    to_card_options,
)
from shared.scheduling.model import CardOption, Profile

# A small catalog with round numbers, so expected values can be computed by hand.
TOY = parse_catalog({
    "reference": "REF", "currency": "USD",
    "cards": {
        "REF": {"vram_gb": 80, "bf16_tflops": 100, "mem_bandwidth_gbs": 1000, "interconnect": "x",
                "price_per_gpu_hour": 4.0, "gpus_per_node": 8},
        "FAST": {"vram_gb": 80, "bf16_tflops": 400, "mem_bandwidth_gbs": 1000, "interconnect": "x",
                 "price_per_gpu_hour": 10.0, "gpus_per_node": 8},
        "SMALL": {"vram_gb": 24, "bf16_tflops": 50, "mem_bandwidth_gbs": 500, "interconnect": "x",
                  "price_per_gpu_hour": 1.0, "gpus_per_node": 4},
        "BIG": {"vram_gb": 141, "bf16_tflops": 100, "mem_bandwidth_gbs": 4000, "interconnect": "x",
                "price_per_gpu_hour": 4.0, "gpus_per_node": 8},
    },
})


def request(**changes) -> MatchRequest:
    fields = {"gpus": 2, "min_vram_gb": 16, "estimate_gpu_hours": 8.0, "profile": Profile.COMPUTE}
    return MatchRequest(**{**fields, **changes})


@pytest.mark.parametrize(
    ("card", "profile", "expected_s"),
    [
        ("REF", Profile.COMPUTE, 4 * 3600),  # 8 GPU-hours over 2 GPUs = 4 h on the reference
        ("FAST", Profile.COMPUTE, 3600),  # 4x the TFLOPS
        ("FAST", Profile.MEMORY, 4 * 3600),  # same bandwidth
        ("FAST", Profile.BALANCED, 2 * 3600),  # sqrt(4 x 1) = 2x
        ("BIG", Profile.MEMORY, 3600),  # 4x the bandwidth
        ("SMALL", Profile.BALANCED, 8 * 3600),  # sqrt(0.5 x 0.5) = 0.5x
    ],
)
def test_runtime_scales_from_the_reference_card_by_profile(card, profile, expected_s):
    assert estimate_runtime_s(request(profile=profile), card, TOY) == pytest.approx(expected_s)


def test_scale_runtime_between_two_cards():
    assert scale_runtime_s(3600, "REF", "FAST", "compute", TOY) == pytest.approx(900)
    assert scale_runtime_s(900, "FAST", "REF", "compute", TOY) == pytest.approx(3600)
    assert relative_speed(TOY.card("REF"), Profile.BALANCED, TOY) == 1.0


def test_real_catalog_scaling_uses_the_datasheet_ratios():
    catalog = load_catalog()
    h100 = estimate_runtime_s(request(gpus=1, estimate_gpu_hours=1.0), "H100", catalog)
    assert h100 == pytest.approx(3600 * 312 / 989)


def test_ranking_is_by_cost_then_runtime_then_name():
    result = rank_cards(request(), TOY)
    costs = {e.card_type: e.cost for e in result.ranked}
    assert costs == pytest.approx({"SMALL": 16.0, "REF": 32.0, "BIG": 32.0, "FAST": 20.0})
    assert [e.card_type for e in result.ranked] == ["SMALL", "FAST", "BIG", "REF"]  # BIG/REF tie: name
    assert result.chosen.card_type == "SMALL" and result.matched


def test_vram_makes_a_card_inadequate_with_a_reason():
    result = rank_cards(request(min_vram_gb=40), TOY)
    assert "SMALL" not in [e.card_type for e in result.ranked]
    (small,) = [e for e in result.rejected if e.card_type == "SMALL"]
    assert not small.adequate and small.why_not == "24 GB VRAM < 40 GB needed"


def test_allow_and_deny_are_honoured():
    assert [e.card_type for e in rank_cards(request(allow={"REF", "BIG"}), TOY).ranked] == ["BIG", "REF"]
    result = rank_cards(request(deny={"SMALL", "FAST"}), TOY)
    assert [e.card_type for e in result.ranked] == ["BIG", "REF"]
    assert {e.card_type: e.why_not for e in result.rejected}["FAST"] == "denied by the task"
    both = rank_cards(request(allow={"REF"}, deny={"REF"}), TOY)
    assert not both.matched  # deny wins


def test_available_types_limit_the_ranking_to_the_fleet():
    result = rank_cards(request(), TOY, available_types=["REF", "FAST"])
    assert [e.card_type for e in result.ranked] == ["FAST", "REF"]
    assert {e.card_type: e.why_not for e in result.rejected}["SMALL"] == "not in the fleet"


def test_oversized_when_a_smaller_adequate_card_exists():
    result = rank_cards(request(min_vram_gb=20, profile=Profile.MEMORY), TOY, available_types=["BIG", "SMALL"])
    assert result.chosen.card_type == "BIG"  # 4x bandwidth: 1h x 2 x 4 = 8 USD vs SMALL 8h x 2 x 1 = 16
    assert result.oversized
    assert "Oversized: the task needs 20 GB and BIG has 141 GB, while SMALL (24 GB) would also do" in result.reason


def test_not_oversized_when_the_chosen_card_is_the_smallest_adequate_one():
    result = rank_cards(request(), TOY)
    assert result.chosen.card_type == "SMALL" and not result.oversized
    assert result.reason.startswith("SMALL is the cheapest adequate card: 16.00 USD, 8.00 h on 2 GPU(s); next: FAST")


def test_unmatchable_request_has_an_empty_ranking_and_says_why_each_card_failed():
    result = rank_cards(request(min_vram_gb=100, deny={"BIG"}), TOY)
    assert result.ranked == () and result.chosen is None and not result.matched
    assert result.reason == (
        "no adequate card type — BIG: denied by the task; FAST: 80 GB VRAM < 100 GB needed; "
        "REF: 80 GB VRAM < 100 GB needed; SMALL: 24 GB VRAM < 100 GB needed"
    )
    assert to_card_options(result) == ()


def test_to_card_options_keeps_matcher_order():
    result = rank_cards(request(), TOY)
    options = to_card_options(result)
    assert options[0] == CardOption("SMALL", result.chosen.runtime_s, result.chosen.cost)
    assert [o.card_type for o in options] == [e.card_type for e in result.ranked]


def test_invalid_requests_are_refused():
    with pytest.raises(ValueError, match="gpus"):
        request(gpus=0)
    with pytest.raises(ValueError):
        request(estimate_gpu_hours=-1)


def test_costs_are_finite_for_every_real_card():
    catalog = load_catalog()
    result = rank_cards(request(min_vram_gb=0), catalog)
    assert len(result.ranked) == len(catalog)
    assert all(math.isfinite(e.cost) and e.cost > 0 for e in result.ranked)
