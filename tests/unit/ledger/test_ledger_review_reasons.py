"""The match review's verdict labels and reason sentences in English and Chinese: every verdict and
every reason code has both; a Chinese reason is rendered from the same facts as the English one
(the numbers and the card named agree), also from the JSON the API gives."""

from __future__ import annotations

import re

import pytest

from services.ledger.match_review import review_json, review_match
from services.ledger.review_reasons import (
    _SENTENCES,
    VERDICT_LABELS,
    ReviewReason,
    ReviewReasonCode,
    Verdict,
    reason_sentence,
    review_reason_text,
    verdict_label,
)
from tests.unit.ledger.test_ledger_match_review import MEMORY_RANKING, facts

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_verdict_has_a_label_in_each_language(lang: str) -> None:
    assert set(VERDICT_LABELS[lang]) == set(Verdict)  # type: ignore[index]
    assert all(label and label != verdict.value for verdict, label in VERDICT_LABELS["zh"].items())
    assert all(CJK.search(label) for label in VERDICT_LABELS["zh"].values())


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_reason_code_has_a_sentence_in_each_language(lang: str) -> None:
    assert set(_SENTENCES[lang]) == set(ReviewReasonCode)  # type: ignore[index]


def test_verdict_labels_and_an_unknown_value() -> None:
    assert verdict_label("oversized", "zh") == "选大了" and verdict_label(Verdict.WORTH_IT, "en") == "worth it"
    assert verdict_label("a_new_verdict", "zh") == "a_new_verdict"


# one case per reason code: (facts, code, pieces of the English sentence, pieces of the Chinese one)
CASES = [
    (facts("idle-h100", "H100", 3600, "6.00", 1, util=30.0), ReviewReasonCode.MOSTLY_IDLE,
     ["30% busy", "under 40%", "L40S (about 4.00 instead of 6.00)"],
     ["GPU 平均只有 30% 忙碌", "低于 40%", "换用更便宜的卡很可能就够：L40S（约 4.00，而非 6.00）", "在 H100 上运行 1.00 h"]),
    (facts("idle-l40s", "L40S", 7200, "4.00", 1, util=22.0), ReviewReasonCode.MOSTLY_IDLE,
     ["fewer or smaller GPUs would likely do"], ["更少或更小的 GPU 很可能就够", "为预估 2.00 h 的 1.00 倍"]),
    (facts("mem", "H100", 3600, "6.00", 1, ranking=MEMORY_RANKING, util=90.0), ReviewReasonCode.CHEAPER_CARD_MET_RUNTIME,
     ["A100 would have taken about 1.03 h (its estimate x 1.00) for 3.50 instead of 6.00"],
     ["A100 约需 1.03 h（其预估 × 1.00），成本约 3.50，而非 6.00"]),
    (facts("slow", "L40S", 10800, "6.00", 1), ReviewReasonCode.UNDERESTIMATED,
     ["ran 3.00 h on L40S (1.50x its estimate of 2.00 h): more than 1.25x the estimate"],
     ["在 L40S 上运行 3.00 h，为预估 2.00 h 的 1.50 倍：超过预估的 1.25 倍"]),
    (facts("sim", "L40S", 120, "0.066667", 1, time_scale=60.0, util=80.0), ReviewReasonCode.NO_CHEAPER_CARD,
     ["2.00 h (simulated ×60) on L40S", "GPUs 80% busy", "no cheaper card"],
     ["在 L40S 上运行 2.00 h（模拟 ×60）", "GPU 80% 忙碌", "没有更便宜的卡能达到这个运行时间"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "code", "english", "chinese"), CASES, ids=[c[0].task_id for c in CASES])
def test_a_reason_is_rendered_from_its_facts_in_either_language(case, code, english, chinese) -> None:  # noqa: ANN001
    review = review_match(case)
    assert review.why.code is code
    assert all(piece in review.reason for piece in english), review.reason
    zh = reason_sentence(review.why, "zh")
    assert all(piece in zh for piece in chinese), zh
    assert not re.search(r"\b(ran|busy|cheaper|estimate|instead)\b", zh), zh  # no English words left
    shown = review_json(review)  # what /v1/review and /v1/matches give, machine values unchanged
    assert (shown["verdict"], shown["reason_code"], shown["reason"]) == (review.verdict.value, code.value, review.reason)
    assert review_reason_text(shown, "zh") == zh and review_reason_text(shown, "en") == review.reason
    assert ReviewReason.from_json(shown["reason_code"], shown["reason_facts"]) == review.why


def test_a_review_stored_before_reason_codes_keeps_its_english_sentence() -> None:
    assert review_reason_text({"verdict": "worth_it", "reason": "ran 1.00 h on L40S"}, "zh") == "ran 1.00 h on L40S"
