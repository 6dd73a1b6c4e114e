"""Card matching (pure): which card types can run a task, how long it takes and what it costs on each.

A request states GPUs, minimum VRAM per GPU, an estimate in GPU-hours on the catalog's reference card,
a profile (what bounds its speed) and allowed/forbidden card types. Runtime on a card scales from the
reference by the TFLOPS ratio (compute-bound), the memory-bandwidth ratio (memory-bound) or the
geometric mean of both (balanced). Every adequate card type is ranked by estimated cost
(runtime x GPUs x price), then runtime, then name; the cheapest is chosen, and the choice is flagged
as oversized when a card with less VRAM would also have been adequate. The result carries a sentence
saying why — for the stored match and for the person reading it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from shared.cards.model import CardSpec, Catalog
from shared.cards.why_not import card_why_not, why_not_text
from shared.scheduling.model import CardOption, Profile

_SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class MatchRequest:
    """What the matcher needs to know about a task (built from a submission by the matcher service)."""

    gpus: int
    min_vram_gb: float
    estimate_gpu_hours: float  # total GPU-hours on the catalog's reference card
    profile: Profile = Profile.BALANCED
    allow: frozenset[str] = frozenset()  # empty = every card type
    deny: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        if self.min_vram_gb < 0 or self.estimate_gpu_hours < 0:
            raise ValueError("min_vram_gb and estimate_gpu_hours must not be negative")
        object.__setattr__(self, "profile", Profile(self.profile))
        object.__setattr__(self, "allow", frozenset(self.allow))
        object.__setattr__(self, "deny", frozenset(self.deny))


@dataclass(frozen=True, slots=True)
class CardEstimate:
    """One card type's verdict for a request: can it run it, how long, at what cost."""

    card_type: str
    runtime_s: float
    cost: float  # runtime x gpus x price per GPU-hour, in the catalog's currency
    adequate: bool
    why_not: str = ""  # empty when adequate


@dataclass(frozen=True, slots=True)
class MatchResult:
    ranked: tuple[CardEstimate, ...]  # adequate card types, cheapest first (empty = unmatchable)
    rejected: tuple[CardEstimate, ...]  # the other card types, by name, each with why_not
    chosen: CardEstimate | None
    smaller: CardEstimate | None  # the adequate card with less VRAM than the chosen one that would also do
    reason: str

    @property
    def oversized(self) -> bool:
        """The chosen card has more VRAM than needed while a smaller adequate card exists."""
        return self.smaller is not None

    @property
    def matched(self) -> bool:
        return self.chosen is not None


def relative_speed(card: CardSpec, profile: Profile, catalog: Catalog) -> float:
    """How many times faster than the reference card `card` runs work of this profile."""
    reference = catalog.reference_card
    compute = card.bf16_tflops / reference.bf16_tflops
    memory = card.mem_bandwidth_gbs / reference.mem_bandwidth_gbs
    if profile == Profile.COMPUTE:
        return compute
    if profile == Profile.MEMORY:
        return memory
    return math.sqrt(compute * memory)


def estimate_runtime_s(task: MatchRequest, card: str | CardSpec, catalog: Catalog) -> float:
    """Wall-clock seconds the task needs on `card` (its GPU-hours spread over its GPUs)."""
    spec = catalog.card(card) if isinstance(card, str) else card
    reference_runtime_s = task.estimate_gpu_hours * _SECONDS_PER_HOUR / task.gpus
    return reference_runtime_s / relative_speed(spec, task.profile, catalog)


def scale_runtime_s(runtime_s: float, from_card: str, to_card: str, profile: Profile | str,
                    catalog: Catalog) -> float:
    """A runtime measured on `from_card`, converted to `to_card` (e.g. a trace's durations)."""
    profile = Profile(profile)
    ratio = relative_speed(catalog.card(from_card), profile, catalog) / relative_speed(catalog.card(to_card), profile, catalog)
    return runtime_s * ratio


def estimate_cost(task: MatchRequest, card: CardSpec, catalog: Catalog) -> float:
    """runtime x GPUs x price, in the catalog's currency."""
    return estimate_runtime_s(task, card, catalog) * task.gpus * card.price_per_gpu_hour / _SECONDS_PER_HOUR


def rank_cards(request: MatchRequest, catalog: Catalog, available_types: Iterable[str] | None = None) -> MatchResult:
    """Rank every adequate card type by cost (then runtime, then name) and choose the cheapest."""
    available = None if available_types is None else frozenset(available_types)
    estimates = [_estimate(request, card, catalog, available) for card in catalog]
    ranked = tuple(sorted((e for e in estimates if e.adequate), key=lambda e: (e.cost, e.runtime_s, e.card_type)))
    rejected = tuple(e for e in estimates if not e.adequate)
    if not ranked:
        return MatchResult((), rejected, None, None, _unmatchable_reason(rejected))
    chosen = ranked[0]
    smaller = _smaller_adequate(chosen, ranked, catalog)
    return MatchResult(ranked, rejected, chosen, smaller, _choice_reason(request, chosen, ranked, smaller, catalog))


def to_card_options(match: MatchResult) -> tuple[CardOption, ...]:
    """The ranked card types as the scheduling core's `QueuedTask.options` (matcher order kept)."""
    return tuple(CardOption(e.card_type, e.runtime_s, e.cost) for e in match.ranked)


def _estimate(request: MatchRequest, card: CardSpec, catalog: Catalog, available: frozenset[str] | None) -> CardEstimate:
    runtime_s = estimate_runtime_s(request, card, catalog)
    cost = runtime_s * request.gpus * card.price_per_gpu_hour / _SECONDS_PER_HOUR
    why_not = _why_not(request, card, available)
    return CardEstimate(card.card_type, runtime_s, cost, adequate=not why_not, why_not=why_not)


def _why_not(request: MatchRequest, card: CardSpec, available: frozenset[str] | None) -> str:
    fleet_gpus = 0 if available is not None and card.card_type not in available else None
    code, facts = card_why_not(request.gpus, request.min_vram_gb, request.allow, request.deny, card, fleet_gpus)
    return "" if code is None else why_not_text(code, facts)


def _smaller_adequate(chosen: CardEstimate, ranked: tuple[CardEstimate, ...], catalog: Catalog) -> CardEstimate | None:
    """The adequate card with the least VRAM below the chosen card's, if any (ties: cheapest)."""
    chosen_vram = catalog.card(chosen.card_type).vram_gb
    smaller = [e for e in ranked if catalog.card(e.card_type).vram_gb < chosen_vram]
    return min(smaller, key=lambda e: (catalog.card(e.card_type).vram_gb, e.cost, e.card_type), default=None)


def _choice_reason(request: MatchRequest, chosen: CardEstimate, ranked: tuple[CardEstimate, ...],
                   smaller: CardEstimate | None, catalog: Catalog) -> str:
    currency = catalog.currency
    text = (f"{chosen.card_type} is the cheapest adequate card: {chosen.cost:.2f} {currency}, "
            f"{_hours(chosen.runtime_s)} on {request.gpus} GPU(s)")
    if len(ranked) > 1:
        runner_up = ranked[1]
        text += f"; next: {runner_up.card_type} at {runner_up.cost:.2f} {currency}, {_hours(runner_up.runtime_s)}"
    if smaller is not None:
        text += (f". Oversized: the task needs {request.min_vram_gb:g} GB and {chosen.card_type} has "
                 f"{catalog.card(chosen.card_type).vram_gb:g} GB, while {smaller.card_type} "
                 f"({catalog.card(smaller.card_type).vram_gb:g} GB) would also do at {smaller.cost:.2f} {currency}")
    return text


def _unmatchable_reason(rejected: tuple[CardEstimate, ...]) -> str:
    reasons = "; ".join(f"{e.card_type}: {e.why_not}" for e in rejected)
    return f"no adequate card type — {reasons}"


def _hours(seconds: float) -> str:
    return f"{seconds / _SECONDS_PER_HOUR:.2f} h"
