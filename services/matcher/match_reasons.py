"""Why the matcher chose a card type and why it did not take each other one, as codes and numbers.

The matcher stores these facts beside its English sentences (`matcher.matches`: each ranking row's
`why_not_code` / `why_not_facts`, the match's `reason_facts`), so a reader in another language
gets the sentence rendered from the numbers that decided, never translated from the English text
(the match review does the same: `services.ledger.review_reasons`). A card's why-not code and its
sentences are `shared.cards.why_not`'s (one rule with `rank_cards`); the choice's English sentence
stays the one `shared.cards.rank_cards` writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from shared.cards import CardEstimate
from shared.cards.why_not import Lang, why_not_text


class RematchTrigger(StrEnum):
    """Why a task was matched again (the sentence's prefix)."""

    FLEET_CHANGED = "fleet_changed"  # facts: card_type (the type that joined)
    CATALOG_CHANGED = "catalog_changed"  # facts: catalog_version


_REMATCH: dict[Lang, dict[RematchTrigger, str]] = {
    "en": {
        RematchTrigger.FLEET_CHANGED: "re-matched: {card_type} joined the fleet",
        RematchTrigger.CATALOG_CHANGED: "re-matched: card catalog version {catalog_version} in force",
    },
    "zh": {
        RematchTrigger.FLEET_CHANGED: "重新匹配：{card_type} 加入了集群",
        RematchTrigger.CATALOG_CHANGED: "重新匹配：卡型目录版本 {catalog_version} 已生效",
    },
}


def rematch_facts(trigger: RematchTrigger, **facts: str) -> dict[str, str]:
    """Why a task is matched again: the trigger and its fact (the card type that joined, the catalog version)."""
    return {"trigger": trigger.value, **facts}


def rematch_text(again: Mapping[str, Any], lang: Lang = "en") -> str:
    """The prefix of a re-match's sentence in `lang`."""
    facts = {key: value for key, value in again.items() if key != "trigger"}
    return _REMATCH[lang][RematchTrigger(again["trigger"])].format(**facts)


def choice_facts(chosen: CardEstimate, runner_up: CardEstimate | None, gpus: int, currency: str,
                 oversized: Mapping[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """The numbers of a choice: the chosen card's cost and runtime, the next one's, and when the
    chosen card is larger than needed, the smaller card that would also do (`oversized`)."""
    facts: dict[str, Any] = {"chosen": chosen.card_type, "cost": chosen.cost, "runtime_s": chosen.runtime_s,
                             "gpus": gpus, "currency": currency}  # fmt: skip
    if runner_up is not None:
        facts["next"] = {"card_type": runner_up.card_type, "cost": runner_up.cost, "runtime_s": runner_up.runtime_s}
    if oversized is not None:
        facts["oversized"] = dict(oversized)
    return facts


def choice_text_zh(facts: Mapping[str, Any]) -> str:
    """The choice in Chinese: cheapest adequate card, the runner-up, and an oversized choice's alternative."""
    money = facts["currency"]
    text = (f"{facts['chosen']} 是满足要求的最便宜卡型：{facts['cost']:.2f} {money}，"
            f"{facts['gpus']} 张 GPU 上约 {_hours(facts['runtime_s'])}")  # fmt: skip
    runner_up = facts.get("next")
    if runner_up:
        text += f"；其次：{runner_up['card_type']}，{runner_up['cost']:.2f} {money}，约 {_hours(runner_up['runtime_s'])}"
    big = facts.get("oversized")
    if big:
        text += (f"。选大了：任务需要 {big['needed_gb']:g} GB 显存，{facts['chosen']} 有 {big['chosen_gb']:g} GB，"
                 f"而 {big['smaller']}（{big['smaller_gb']:g} GB）也能满足，成本 {big['smaller_cost']:.2f} {money}")  # fmt: skip
    return text


def match_reason_text(match: Mapping[str, Any], lang: Lang = "en") -> str:
    """A stored match's sentence (a `matcher.matches` row) in `lang`: rendered from its facts in
    Chinese when it has them (a choice, and why it was matched again), else its English sentence."""
    facts = match.get("reason_facts")
    if lang == "en" or not facts or "chosen" not in facts:
        return str(match.get("reason") or "")
    text = choice_text_zh(facts)
    again = facts.get("again")
    if again:
        text = rematch_text(again, lang) + "；" + text
    return text


def ranking_row_why_not(row: Mapping[str, Any], lang: Lang = "en") -> str | None:
    """A ranking row's why-not in `lang` (its stored English sentence when it has no code)."""
    code = row.get("why_not_code")
    if lang == "zh" and code:
        return why_not_text(code, row.get("why_not_facts") or {}, lang)
    return row.get("why_not")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:.2f} 小时"
