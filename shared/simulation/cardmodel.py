"""How card types change a task's run time, price and options, as the simulator needs it.

`CardModel` is the seam: `CatalogCardModel` (in `matching.py`) uses cardflow's card catalog and
matcher; `FlatCardModel` treats every card as equally fast (tests, traces without card data).
"""

from __future__ import annotations

from typing import Mapping, Protocol

from shared.scheduling.model import CardOption
from shared.simulation.workload import SimTask


class CardModel(Protocol):
    """Card knowledge the engine needs."""

    def options(self, task: SimTask, estimate_s: float, fleet_gpus: Mapping[str, int]) -> tuple[CardOption, ...]:
        """Adequate card types present in the fleet (with enough GPUs), cheapest first, with the
        estimate (given in seconds on the task's trace card) converted to each card."""
        ...

    def speed(self, task: SimTask, card: str) -> float:
        """Seconds on `card` per second of the task's trace card (1.0 = same speed)."""
        ...

    def price(self, card: str) -> float:
        """Price per GPU-hour of `card`."""
        ...


def allowed_cards(task: SimTask, fleet_gpus: Mapping[str, int]) -> list[str]:
    """Card types the task accepts that the fleet has, with at least `task.gpus` GPUs in total."""
    candidates = task.card_types or tuple(fleet_gpus)
    return [card for card in candidates if fleet_gpus.get(card, 0) >= task.gpus]


class FlatCardModel:
    """Every card equally fast; prices per card (default 1.0 per GPU-hour)."""

    def __init__(self, prices: Mapping[str, float] | None = None) -> None:
        self._prices = dict(prices or {})

    def options(self, task: SimTask, estimate_s: float, fleet_gpus: Mapping[str, int]) -> tuple[CardOption, ...]:
        options = [
            CardOption(card, estimate_s, estimate_s * task.gpus * self.price(card) / 3600.0)
            for card in allowed_cards(task, fleet_gpus)
        ]
        return tuple(sorted(options, key=lambda option: (option.cost, option.runtime_s, option.card_type)))

    def speed(self, task: SimTask, card: str) -> float:
        return 1.0

    def price(self, card: str) -> float:
        return self._prices.get(card, 1.0)
