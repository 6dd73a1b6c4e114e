"""The match review's verdicts and their reasons, in English and Chinese (pure).

    label = verdict_label(Verdict.OVERSIZED, "zh")        # "选大了"
    text = reason_sentence(review.why, "zh")               # rendered from the facts that decided

A verdict rule (`services.ledger.match_review.VERDICT_RULES`) decides with a `ReviewReason`: which
rule applied (`ReviewReasonCode`) and the numbers it looked at. The sentence is rendered from those
facts in the reader's language — never translated from the English one. JSON keeps the stable
machine values: `verdict` (a `Verdict` value), `reason_code` and `reason_facts` (what
`ReviewReason.from_json` reads back), and `reason` (the English sentence), so the CLI and the
console render the same facts in Chinese on the client side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Literal

ReviewLanguage = Literal["en", "zh"]


class Verdict(StrEnum):
    WORTH_IT = "worth_it"  # the card it ran on was the right call
    OVERSIZED = "oversized"  # a smaller/cheaper card would have done (or its GPUs sat mostly idle)
    UNDERESTIMATED = "underestimated"  # it ran much longer than estimated: the estimate, not the card, was off


VERDICT_LABELS: dict[ReviewLanguage, dict[Verdict, str]] = {
    "en": {Verdict.WORTH_IT: "worth it", Verdict.OVERSIZED: "oversized", Verdict.UNDERESTIMATED: "underestimated"},
    "zh": {Verdict.WORTH_IT: "值得", Verdict.OVERSIZED: "选大了", Verdict.UNDERESTIMATED: "低估"},
}
"""Every verdict's label in each language (a test fails when a verdict lacks one)."""


class ReviewReasonCode(StrEnum):
    """Which rule decided the verdict (`no_cheaper_card`: none applied, so it was worth it)."""

    MOSTLY_IDLE = "mostly_idle"
    CHEAPER_CARD_MET_RUNTIME = "cheaper_card_met_runtime"
    UNDERESTIMATED = "underestimated"
    NO_CHEAPER_CARD = "no_cheaper_card"


@dataclass(frozen=True, slots=True)
class ReviewReason:
    """Why a verdict: the deciding rule and the numbers it decided on.

    `runtime_s`, `est_runtime_s`, `cost` are the run's (in the agent's time, `time_scale` its clock);
    `threshold` is the rule's (`low_util_pct` for mostly_idle, `underestimated_ratio` for
    underestimated); `card_*` name the cheaper card a rule points to, with its hindsight runtime/cost.
    """

    code: ReviewReasonCode
    ran_on: str
    runtime_s: float
    est_runtime_s: float
    ratio: float
    cost: float
    time_scale: float = 1.0
    util_pct: float | None = None
    threshold: float | None = None
    card_type: str | None = None
    card_runtime_s: float | None = None
    card_cost: float | None = None

    def facts_json(self) -> dict[str, Any]:
        """The facts without the code (JSON `reason_facts`; the code is `reason_code`)."""
        facts = asdict(self)
        del facts["code"]
        return facts

    @classmethod
    def from_json(cls, code: str, facts: Mapping[str, Any]) -> ReviewReason:
        return cls(code=ReviewReasonCode(code), **facts)


def verdict_label(verdict: Verdict | str, lang: str = "en") -> str:
    """A verdict's label in `lang` ("en" or "zh"); an unknown value is shown as it is."""
    try:
        return VERDICT_LABELS[_language(lang)][Verdict(verdict)]
    except ValueError:
        return str(verdict)


def reason_sentence(reason: ReviewReason, lang: str = "en") -> str:
    """Why the verdict, as a sentence in `lang`, rendered from the facts that decided it."""
    return _SENTENCES[_language(lang)][reason.code](reason)


def review_reason_text(review: Mapping[str, Any], lang: str = "en") -> str:
    """A review's reason (JSON as `/v1/review` and `/v1/matches` give it) in `lang`; a review stored
    before `reason_code` existed keeps its English sentence."""
    code = review.get("reason_code")
    if _language(lang) == "en" or code is None:
        return str(review.get("reason") or "")
    return reason_sentence(ReviewReason.from_json(code, review.get("reason_facts") or {}), lang)


def simulated_label(time_scale: float) -> str:
    """"simulated ×60": the mark of a figure from an agent whose clock runs 60x the wall clock."""
    return f"simulated ×{time_scale:g}"


def _language(lang: str) -> ReviewLanguage:
    return "zh" if str(lang) == "zh" else "en"


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


# ---- English ------------------------------------------------------------------------------------------


def _ran_en(r: ReviewReason) -> str:
    clock = f" ({simulated_label(r.time_scale)})" if r.time_scale != 1.0 else ""
    return f"{_h(r.runtime_s)}{clock} on {r.ran_on} ({r.ratio:.2f}x its estimate of {_h(r.est_runtime_s)})"


def _mostly_idle_en(r: ReviewReason) -> str:
    instead = (f"a cheaper card would likely do: {r.card_type} (about {r.card_cost:.2f} instead of {r.cost:.2f})"
               if r.card_type else "fewer or smaller GPUs would likely do")  # fmt: skip
    return (f"its GPUs were {r.util_pct:.0f}% busy on average (time-weighted, under {r.threshold:.0f}%); {instead};"
            f" ran {_ran_en(r)}")  # fmt: skip


def _cheaper_en(r: ReviewReason) -> str:
    return (f"{r.card_type} would have taken about {_h(r.card_runtime_s or 0.0)} (its estimate x {r.ratio:.2f})"
            f" for {r.card_cost:.2f} instead of {r.cost:.2f}; ran {_ran_en(r)}")  # fmt: skip


def _underestimated_en(r: ReviewReason) -> str:
    return f"ran {_ran_en(r)}: more than {r.threshold:g}x the estimate"


def _worth_it_en(r: ReviewReason) -> str:
    busy = f", GPUs {r.util_pct:.0f}% busy" if r.util_pct is not None else ""
    return f"ran {_ran_en(r)}{busy}; no cheaper card would have met that runtime"


# ---- 中文 ------------------------------------------------------------------------------------------------


def _ran_zh(r: ReviewReason) -> str:
    clock = f"（模拟 ×{r.time_scale:g}）" if r.time_scale != 1.0 else ""
    return f"在 {r.ran_on} 上运行 {_h(r.runtime_s)}{clock}，为预估 {_h(r.est_runtime_s)} 的 {r.ratio:.2f} 倍"


def _mostly_idle_zh(r: ReviewReason) -> str:
    instead = (f"换用更便宜的卡很可能就够：{r.card_type}（约 {r.card_cost:.2f}，而非 {r.cost:.2f}）"
               if r.card_type else "更少或更小的 GPU 很可能就够")  # fmt: skip
    return f"GPU 平均只有 {r.util_pct:.0f}% 忙碌（按时间加权，低于 {r.threshold:.0f}%）；{instead}；{_ran_zh(r)}"


def _cheaper_zh(r: ReviewReason) -> str:
    return (f"{r.card_type} 约需 {_h(r.card_runtime_s or 0.0)}（其预估 × {r.ratio:.2f}），成本约 {r.card_cost:.2f}，"
            f"而非 {r.cost:.2f}；{_ran_zh(r)}")  # fmt: skip


def _underestimated_zh(r: ReviewReason) -> str:
    return f"{_ran_zh(r)}：超过预估的 {r.threshold:g} 倍"


def _worth_it_zh(r: ReviewReason) -> str:
    busy = f"，GPU {r.util_pct:.0f}% 忙碌" if r.util_pct is not None else ""
    return f"{_ran_zh(r)}{busy}；没有更便宜的卡能达到这个运行时间"


_SENTENCES: dict[ReviewLanguage, dict[ReviewReasonCode, Callable[[ReviewReason], str]]] = {
    "en": {ReviewReasonCode.MOSTLY_IDLE: _mostly_idle_en, ReviewReasonCode.CHEAPER_CARD_MET_RUNTIME: _cheaper_en,
           ReviewReasonCode.UNDERESTIMATED: _underestimated_en, ReviewReasonCode.NO_CHEAPER_CARD: _worth_it_en},
    "zh": {ReviewReasonCode.MOSTLY_IDLE: _mostly_idle_zh, ReviewReasonCode.CHEAPER_CARD_MET_RUNTIME: _cheaper_zh,
           ReviewReasonCode.UNDERESTIMATED: _underestimated_zh, ReviewReasonCode.NO_CHEAPER_CARD: _worth_it_zh},
}  # fmt: skip
"""Every reason code's sentence in each language (a test fails when one is missing)."""
