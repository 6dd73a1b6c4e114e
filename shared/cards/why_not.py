"""Why a card type cannot run a task (pure): one rule, as a code and its numbers, rendered in English or Chinese.

`rank_cards` (which knows only which card types the fleet has) and the matcher (which also knows
how many GPUs of each) ask the same rule; each reader gets the sentence rendered from the numbers
that decided, never translated from an English sentence.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from shared.cards.model import CardSpec

Lang = Literal["en", "zh"]


class WhyNotCode(StrEnum):
    """Why one card type cannot run a task (the first that applies, in this order)."""

    DENIED = "denied"  # the task's deny list names it
    NOT_ALLOWED = "not_allowed"  # the task's allow list does not name it
    TOO_LITTLE_VRAM = "too_little_vram"  # facts: vram_gb, needed_gb
    NOT_IN_FLEET = "not_in_fleet"
    TOO_FEW_IN_FLEET = "too_few_in_fleet"  # facts: fleet_gpus, needed_gpus


_WHY_NOT: dict[Lang, dict[WhyNotCode, str]] = {
    "en": {
        WhyNotCode.DENIED: "denied by the task",
        WhyNotCode.NOT_ALLOWED: "not among the task's allowed card types",
        WhyNotCode.TOO_LITTLE_VRAM: "{vram_gb:g} GB VRAM < {needed_gb:g} GB needed",
        WhyNotCode.NOT_IN_FLEET: "not in the fleet",
        WhyNotCode.TOO_FEW_IN_FLEET: "the fleet has {fleet_gpus} GPU(s) of it, {needed_gpus} needed",
    },
    "zh": {
        WhyNotCode.DENIED: "任务禁止使用该卡型",
        WhyNotCode.NOT_ALLOWED: "不在任务允许的卡型之列",
        WhyNotCode.TOO_LITTLE_VRAM: "显存 {vram_gb:g} GB，少于所需的 {needed_gb:g} GB",
        WhyNotCode.NOT_IN_FLEET: "集群中没有该卡型",
        WhyNotCode.TOO_FEW_IN_FLEET: "集群中该卡型只有 {fleet_gpus} 张 GPU，任务需要 {needed_gpus} 张",
    },
}


def card_why_not(
    gpus: int, min_vram_gb: float, allow: frozenset[str], deny: frozenset[str], card: CardSpec, fleet_gpus: int | None
) -> tuple[WhyNotCode | None, dict[str, Any]]:
    """Why `card` cannot run a task needing `gpus` GPUs of `min_vram_gb` (None: it can), with the numbers.

    `fleet_gpus` is how many GPUs of the card type the fleet has; None when only its presence is
    known and it is present (then only a missing card type, 0, is a reason)."""
    if card.card_type in deny:
        return WhyNotCode.DENIED, {}
    if allow and card.card_type not in allow:
        return WhyNotCode.NOT_ALLOWED, {}
    if card.vram_gb < min_vram_gb:
        return WhyNotCode.TOO_LITTLE_VRAM, {"vram_gb": card.vram_gb, "needed_gb": min_vram_gb}
    if fleet_gpus == 0:
        return WhyNotCode.NOT_IN_FLEET, {}
    if fleet_gpus is not None and fleet_gpus < gpus:
        return WhyNotCode.TOO_FEW_IN_FLEET, {"fleet_gpus": fleet_gpus, "needed_gpus": gpus}
    return None, {}


def why_not_text(code: WhyNotCode | str, facts: Mapping[str, Any], lang: Lang = "en") -> str:
    """One card type's why-not sentence in `lang`, from its code and numbers."""
    return _WHY_NOT[lang][WhyNotCode(code)].format(**facts)
