"""`CatalogCardModel`: the simulator's card knowledge, taken from cardflow's catalog and matcher.

- options: `shared.cards.rank_cards` over the fleet's card types (allow list, VRAM, cost order),
  with the task's estimate converted from its trace card to the catalog's reference card first;
- speed: `shared.cards.scale_runtime_s` from the trace card to the granted card;
- price: the catalog's price per GPU-hour.
Tasks without a trace card have card-independent durations: every adequate card gets the same
run time, ordered by price. Card types missing from the catalog are taken as equally fast as any
other, at `UNKNOWN_CARD_PRICE` per GPU-hour (and listed by `unknown_cards`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from shared.cards import Catalog, MatchRequest, load_catalog, rank_cards, scale_runtime_s, to_card_options
from shared.scheduling.model import CardOption
from shared.simulation.cardmodel import allowed_cards
from shared.simulation.workload import SimTask

UNKNOWN_CARD_PRICE = 1.0


class CatalogCardModel:
    """Card options, speed ratios and prices from a card catalog (the packaged one by default)."""

    def __init__(self, catalog_path: str | Path | None = None, *, catalog: Catalog | None = None) -> None:
        self._path = catalog_path
        self.catalog: Catalog = catalog or load_catalog(catalog_path)
        self._speeds: dict[tuple[str, str, str], float] = {}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._path is None and self.catalog is not None:
            return (_with_catalog, (self.catalog,))  # a catalog given as a value (e.g. the `cards` document in force)
        return (CatalogCardModel, (self._path,))  # rebuilt from the file in worker processes

    def unknown_cards(self, cards: Mapping[str, int]) -> list[str]:
        return sorted(card for card in cards if card not in self.catalog)

    def options(self, task: SimTask, estimate_s: float, fleet_gpus: Mapping[str, int]) -> tuple[CardOption, ...]:
        cards = allowed_cards(task, fleet_gpus)
        known = [card for card in cards if card in self.catalog]
        if task.trace_card is None or task.trace_card not in self.catalog or len(known) < len(cards):
            return self._flat_options(task, estimate_s, cards)
        reference = scale_runtime_s(estimate_s, task.trace_card, self.catalog.reference, task.profile, self.catalog)
        request = MatchRequest(gpus=task.gpus, min_vram_gb=task.min_vram_gb,
                               estimate_gpu_hours=reference * task.gpus / 3600.0, profile=task.profile)
        return to_card_options(rank_cards(request, self.catalog, available_types=known))

    def _flat_options(self, task: SimTask, estimate_s: float, cards: list[str]) -> tuple[CardOption, ...]:
        """Card-independent run time; adequacy by VRAM where the catalog knows the card; by price."""
        adequate = [c for c in cards if c not in self.catalog or self.catalog.card(c).vram_gb >= task.min_vram_gb]
        options = [CardOption(c, estimate_s, estimate_s * task.gpus * self.price(c) / 3600.0) for c in adequate]
        return tuple(sorted(options, key=lambda option: (option.cost, option.card_type)))

    def speed(self, task: SimTask, card: str) -> float:
        trace_card = task.trace_card
        if trace_card is None or trace_card == card or trace_card not in self.catalog or card not in self.catalog:
            return 1.0
        key = (trace_card, card, task.profile.value)
        if key not in self._speeds:
            self._speeds[key] = scale_runtime_s(1.0, trace_card, card, task.profile, self.catalog)
        return self._speeds[key]

    def price(self, card: str) -> float:
        return self.catalog.card(card).price_per_gpu_hour if card in self.catalog else UNKNOWN_CARD_PRICE


def _with_catalog(catalog: Catalog) -> CatalogCardModel:
    return CatalogCardModel(catalog=catalog)
