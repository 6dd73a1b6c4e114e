"""The matcher's sentences rendered from codes and numbers, in English and Chinese."""

from __future__ import annotations

import pytest

from services.matcher.decide import Fleet, decide
from services.matcher.match_reasons import (
    RematchTrigger, match_reason_text, ranking_row_why_not, rematch_facts,
)  # fmt: skip
from shared.cards import load_catalog
from shared.cards.why_not import WhyNotCode, why_not_text

from .builders import a_request

CATALOG = load_catalog()


def test_every_why_not_code_has_a_sentence_in_both_languages() -> None:
    facts = {"vram_gb": 24, "needed_gb": 40, "fleet_gpus": 2, "needed_gpus": 4}
    for code in WhyNotCode:
        assert why_not_text(code, facts, "en") and why_not_text(code, facts, "zh")
    assert why_not_text(WhyNotCode.TOO_LITTLE_VRAM, facts, "zh") == "显存 24 GB，少于所需的 40 GB"
    assert why_not_text(WhyNotCode.TOO_FEW_IN_FLEET, facts, "zh") == "集群中该卡型只有 2 张 GPU，任务需要 4 张"


def test_each_cards_why_not_in_chinese_comes_from_the_same_facts_as_the_english_one() -> None:
    fleet = Fleet({"H100": 8, "A10": 4, "L40S": 2})
    decision = decide(a_request(gpus=4, min_vram_gb=40, deny=frozenset({"H200"})), CATALOG, fleet)
    by_card = {v.card_type: v for v in decision.verdicts}
    assert by_card["A10"].why_not == "24 GB VRAM < 40 GB needed"  # the English sentence, as before
    rows = {v.card_type: {"why_not": v.why_not or None, "why_not_code": v.why_not_code, "why_not_facts": v.why_not_facts}
            for v in decision.verdicts}  # fmt: skip
    assert ranking_row_why_not(rows["A10"], "zh") == "显存 24 GB，少于所需的 40 GB"
    assert ranking_row_why_not(rows["H200"], "zh") == "任务禁止使用该卡型"
    assert ranking_row_why_not(rows["A100-80G"], "zh") == "集群中没有该卡型"
    assert ranking_row_why_not(rows["H100"], "zh") is None  # adequate
    assert ranking_row_why_not({"why_not": "an older row without a code"}, "zh") == "an older row without a code"


def test_the_choice_in_chinese_names_the_cheapest_card_the_runner_up_and_an_oversized_alternative() -> None:
    fleet = Fleet({"H100": 8, "A10": 4, "L40S": 8})
    decision = decide(a_request(gpus=1, min_vram_gb=20, estimate_gpu_hours=2), CATALOG, fleet)
    facts = decision.choice
    assert facts is not None and facts["chosen"] == decision.result.chosen.card_type
    chosen, runner_up = decision.result.ranked[0], decision.result.ranked[1]
    zh = match_reason_text({"reason": decision.detail, "reason_facts": facts}, "zh")
    assert zh.startswith(f"{chosen.card_type} 是满足要求的最便宜卡型：{chosen.cost:.2f} {CATALOG.currency}，1 张 GPU 上约 ")
    assert f"其次：{runner_up.card_type}，{runner_up.cost:.2f} {CATALOG.currency}" in zh
    assert match_reason_text({"reason": decision.detail, "reason_facts": facts}, "en") == decision.detail
    if decision.result.oversized:
        assert "选大了" in zh and facts["oversized"]["smaller"] in zh
    else:
        assert "选大了" not in zh


def test_an_oversized_choice_in_chinese_names_the_smaller_card_that_would_also_do() -> None:
    facts = {"chosen": "H100", "cost": 12.0, "runtime_s": 7200.0, "gpus": 2, "currency": "CNY",
             "oversized": {"needed_gb": 20, "chosen_gb": 80, "smaller": "A10", "smaller_gb": 24, "smaller_cost": 14.5},
             "again": rematch_facts(RematchTrigger.FLEET_CHANGED, card_type="H100")}  # fmt: skip
    assert match_reason_text({"reason": "x", "reason_facts": facts}, "zh") == (
        "重新匹配：H100 加入了集群；H100 是满足要求的最便宜卡型：12.00 CNY，2 张 GPU 上约 2.00 小时。"
        "选大了：任务需要 20 GB 显存，H100 有 80 GB，而 A10（24 GB）也能满足，成本 14.50 CNY")


@pytest.mark.parametrize("facts", [None, {}])
def test_a_match_without_facts_keeps_its_english_sentence(facts: dict | None) -> None:
    assert match_reason_text({"reason": "no GPU node has registered yet", "reason_facts": facts}, "zh") == (
        "no GPU node has registered yet")
