"""Card catalog and card matching.

- `load_catalog(path=None) -> Catalog`: the packaged catalog.yaml or an operator's file.
- `rank_cards(request, catalog, available_types=None) -> MatchResult`: adequate card types by cost.
- `estimate_runtime_s`, `scale_runtime_s`, `relative_speed`: runtime on one card from another.
- `to_card_options(match)`: the ranking as `QueuedTask.options` for the scheduling core.

`model` and `matching` are pure (no I/O); only `catalog` reads files.
"""

from shared.cards.catalog import CatalogError, load_catalog, parse_catalog
from shared.cards.matching import (
    CardEstimate,
    MatchRequest,
    MatchResult,
    estimate_cost,
    estimate_runtime_s,
    rank_cards,
    relative_speed,
    scale_runtime_s,
    to_card_options,
)
from shared.cards.model import CardSpec, Catalog

__all__ = [
    "CardEstimate",
    "CardSpec",
    "Catalog",
    "CatalogError",
    "MatchRequest",
    "MatchResult",
    "estimate_cost",
    "estimate_runtime_s",
    "load_catalog",
    "parse_catalog",
    "rank_cards",
    "relative_speed",
    "scale_runtime_s",
    "to_card_options",
]
