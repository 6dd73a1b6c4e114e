"""One why-not rule for `rank_cards` and the matcher: the first reason that applies, with its numbers."""

from __future__ import annotations

from shared.cards import CardSpec
from shared.cards.why_not import WhyNotCode, card_why_not, why_not_text

SMALL = CardSpec("SMALL", vram_gb=24, bf16_tflops=100, mem_bandwidth_gbs=1000, interconnect="PCIe", price_per_gpu_hour=1.0,
                 gpus_per_node=8)


def why(fleet_gpus: int | None, *, gpus: int = 2, vram: float = 16, allow: set[str] = set(), deny: set[str] = set()):
    return card_why_not(gpus, vram, frozenset(allow), frozenset(deny), SMALL, fleet_gpus)


def test_the_first_reason_in_order_wins():
    assert why(0, deny={"SMALL"}, allow={"SMALL"}) == (WhyNotCode.DENIED, {})
    assert why(0, allow={"OTHER"}) == (WhyNotCode.NOT_ALLOWED, {})
    assert why(0, vram=40) == (WhyNotCode.TOO_LITTLE_VRAM, {"vram_gb": 24, "needed_gb": 40})  # before the fleet
    assert why(0) == (WhyNotCode.NOT_IN_FLEET, {})
    assert why(1) == (WhyNotCode.TOO_FEW_IN_FLEET, {"fleet_gpus": 1, "needed_gpus": 2})
    assert why(2) == (None, {})


def test_an_unknown_count_checks_only_the_task_s_own_limits():
    assert why(None) == (None, {})
    assert why(None, vram=40)[0] is WhyNotCode.TOO_LITTLE_VRAM


def test_the_sentence_is_rendered_from_the_numbers_in_either_language():
    code, facts = why(0, vram=40)
    assert why_not_text(code, facts) == "24 GB VRAM < 40 GB needed"
    assert why_not_text(code, facts, "zh") == "显存 24 GB，少于所需的 40 GB"
