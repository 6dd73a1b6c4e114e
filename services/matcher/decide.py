"""The matcher's decision (pure): which card types of the live fleet can run a task, and why not.

`decide(request, catalog, fleet)` gives every catalog card type a verdict (runtime, cost, and a
why-not when it is inadequate), ranks the adequate ones with the core's `rank_cards`, and when none
is adequate names the first cause, in this order:

1. `no_allowed_card_type` — allow/deny leave no card type of the catalog (permanent);
2. `insufficient_vram` — no allowed card type of the catalog has the VRAM (permanent);
3. `no_fleet` — no GPU node has registered yet (waits for the fleet);
4. `no_allowed_card_type` — no allowed card type is in the fleet (waits);
5. `insufficient_vram` — no card in the fleet has the VRAM, a catalog card would (waits);
6. `too_many_gpus` — the fleet has fewer GPUs of every fitting type than the task needs (waits).

"Waits" means a node registration may make the task matchable: the service matches it again then.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

from shared.cards import CardSpec, Catalog, MatchRequest, MatchResult, estimate_runtime_s, rank_cards
from shared.cards.why_not import WhyNotCode, card_why_not, why_not_text
from shared.events.reasons import UnmatchableReason

from services.matcher.match_reasons import choice_facts

NO_FLEET_DETAIL = "no GPU node has registered yet"


@dataclass(frozen=True, slots=True)
class Fleet:
    """The live fleet as the matcher sees it: GPUs per card type (alive nodes only)."""

    gpus_by_type: Mapping[str, int]

    def __post_init__(self) -> None:
        live = {card: gpus for card, gpus in self.gpus_by_type.items() if gpus > 0}
        object.__setattr__(self, "gpus_by_type", MappingProxyType(dict(sorted(live.items()))))

    def gpus(self, card_type: str) -> int:
        return self.gpus_by_type.get(card_type, 0)

    @property
    def card_types(self) -> tuple[str, ...]:
        return tuple(self.gpus_by_type)

    def __bool__(self) -> bool:
        return bool(self.gpus_by_type)


@dataclass(frozen=True, slots=True)
class CardVerdict:
    """One catalog card type for one request: estimates, GPUs of it in the fleet, why it cannot run it
    (a code and its numbers; the sentence is rendered from them, `services.matcher.match_reasons`)."""

    card_type: str
    runtime_s: float
    cost: float
    fleet_gpus: int
    why_not_code: WhyNotCode | None = None  # None = adequate
    why_not_facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def adequate(self) -> bool:
        return self.why_not_code is None

    @property
    def why_not(self) -> str:
        """The why-not sentence in English ("" when adequate)."""
        return "" if self.why_not_code is None else why_not_text(self.why_not_code, self.why_not_facts)


@dataclass(frozen=True, slots=True)
class MatchDecision:
    """The matcher's answer for one task."""

    verdicts: tuple[CardVerdict, ...]  # every catalog card type, by name
    result: MatchResult | None  # the ranking of the adequate card types; None = unmatchable
    unmatchable: UnmatchableReason | None
    detail: str  # why the chosen card type, or why no card type
    waits_for_fleet: bool  # unmatchable now, but a node registration may change that
    choice: Mapping[str, Any] | None = None  # the choice's numbers (`match_reasons.choice_facts`), when matched

    @property
    def matched(self) -> bool:
        return self.result is not None and self.result.matched


def decide(request: MatchRequest, catalog: Catalog, fleet: Fleet) -> MatchDecision:
    """Rank the adequate card types of the live fleet, or say why there is none."""
    verdicts = tuple(_verdict(request, card, catalog, fleet) for card in catalog)
    adequate = [v.card_type for v in verdicts if v.adequate]
    if adequate:
        result = rank_cards(request, catalog, available_types=adequate)
        return MatchDecision(verdicts, result, None, result.reason, False, _choice(request, result, catalog))
    reason, detail, waits = _unmatchable(request, catalog, fleet)
    return MatchDecision(verdicts, None, reason, detail, waits)


def catalog_fingerprint(catalog: Catalog) -> str:
    """sha256 of the catalog's content (cards, reference, currency, version): which figures were used."""
    body = {
        "version": catalog.version,
        "reference": catalog.reference,
        "currency": catalog.currency,
        "cards": [asdict(card) for card in catalog],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _verdict(request: MatchRequest, card: CardSpec, catalog: Catalog, fleet: Fleet) -> CardVerdict:
    runtime_s = estimate_runtime_s(request, card, catalog)
    cost = runtime_s * request.gpus * card.price_per_gpu_hour / 3600.0
    fleet_gpus = fleet.gpus(card.card_type)
    why_not = card_why_not(request.gpus, request.min_vram_gb, request.allow, request.deny, card, fleet_gpus)
    return CardVerdict(card.card_type, runtime_s, cost, fleet_gpus, *why_not)


def _choice(request: MatchRequest, result: MatchResult, catalog: Catalog) -> dict[str, Any] | None:
    """The numbers behind `result.reason` (`rank_cards` chose them)."""
    chosen, smaller = result.chosen, result.smaller
    if chosen is None:
        return None
    oversized = None if smaller is None else {
        "needed_gb": request.min_vram_gb, "chosen_gb": catalog.card(chosen.card_type).vram_gb,
        "smaller": smaller.card_type, "smaller_gb": catalog.card(smaller.card_type).vram_gb, "smaller_cost": smaller.cost,
    }  # fmt: skip
    runner_up = result.ranked[1] if len(result.ranked) > 1 else None
    return choice_facts(chosen, runner_up, request.gpus, catalog.currency, oversized)


def _is_allowed(request: MatchRequest, card_type: str) -> bool:
    return card_type not in request.deny and (not request.allow or card_type in request.allow)


def _unmatchable(request: MatchRequest, catalog: Catalog, fleet: Fleet) -> tuple[UnmatchableReason, str, bool]:
    """The first cause (module docstring order), its sentence, and whether the fleet may fix it."""
    allowed = [card for card in catalog if _is_allowed(request, card.card_type)]
    if not allowed:
        return UnmatchableReason.NO_ALLOWED_CARD_TYPE, f"{_filter_text(request)} leaves no card type of the catalog", False
    fitting = [card for card in allowed if card.vram_gb >= request.min_vram_gb]
    if not fitting:
        return UnmatchableReason.INSUFFICIENT_VRAM, _vram_beyond_catalog(request, allowed, fleet), False
    if not fleet:
        return UnmatchableReason.NO_FLEET, NO_FLEET_DETAIL, True
    allowed_in_fleet = [card for card in allowed if fleet.gpus(card.card_type)]
    if not allowed_in_fleet:
        detail = f"no card type in the fleet ({', '.join(fleet.card_types)}) is allowed: {_filter_text(request)}"
        return UnmatchableReason.NO_ALLOWED_CARD_TYPE, detail, True
    fitting_in_fleet = [card for card in fitting if fleet.gpus(card.card_type)]
    if not fitting_in_fleet:
        return UnmatchableReason.INSUFFICIENT_VRAM, _vram_beyond_fleet(request, allowed_in_fleet, fitting), True
    counts = ", ".join(f"{card.card_type}: {fleet.gpus(card.card_type)}" for card in fitting_in_fleet)
    most = max(fleet.gpus(card.card_type) for card in fitting_in_fleet)
    detail = f"needs {request.gpus} GPUs; the fleet has at most {most} of a fitting card type ({counts})"
    return UnmatchableReason.TOO_MANY_GPUS, detail, True


def _vram_beyond_catalog(request: MatchRequest, allowed: list[CardSpec], fleet: Fleet) -> str:
    largest = _largest(allowed)
    text = f"needs {request.min_vram_gb:g} GB VRAM per GPU"
    in_fleet = [card for card in allowed if fleet.gpus(card.card_type)]
    if in_fleet:
        fleet_largest = _largest(in_fleet)
        text += f"; the largest card in the fleet ({fleet_largest.card_type}) has {fleet_largest.vram_gb:g} GB"
    return text + f"; no allowed card type in the catalog has that much (largest: {largest.card_type}, {largest.vram_gb:g} GB)"


def _vram_beyond_fleet(request: MatchRequest, allowed_in_fleet: list[CardSpec], fitting: list[CardSpec]) -> str:
    largest = _largest(allowed_in_fleet)
    would_fit = ", ".join(f"{card.card_type} ({card.vram_gb:g} GB)" for card in sorted(fitting, key=_by_vram))
    return (
        f"needs {request.min_vram_gb:g} GB VRAM per GPU; the largest card in the fleet ({largest.card_type}) has "
        f"{largest.vram_gb:g} GB; waits for a node of a card type that fits: {would_fit}"
    )


def _largest(cards: list[CardSpec]) -> CardSpec:
    return max(cards, key=lambda card: (card.vram_gb, card.card_type))


def _by_vram(card: CardSpec) -> tuple[float, str]:
    return card.vram_gb, card.card_type


def _filter_text(request: MatchRequest) -> str:
    parts = []
    if request.allow:
        parts.append(f"allow {', '.join(sorted(request.allow))}")
    if request.deny:
        parts.append(f"deny {', '.join(sorted(request.deny))}")
    return "the task's " + " / ".join(parts) if parts else "the task's card type filter"
