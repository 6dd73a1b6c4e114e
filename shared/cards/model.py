"""Card catalog value types: one card type's figures, and the catalog that holds them.

Pure (no I/O): `catalog.py` loads the YAML, `matching.py` ranks cards, both share these types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

REQUIRED_FIELDS = (
    "vram_gb",
    "bf16_tflops",
    "mem_bandwidth_gbs",
    "interconnect",
    "price_per_gpu_hour",
    "gpus_per_node",
)


@dataclass(frozen=True, slots=True)
class CardSpec:
    """One card type as the matcher and the cost model see it."""

    card_type: str
    vram_gb: float  # memory per GPU
    bf16_tflops: float  # dense BF16 tensor throughput (FP16 for cards without BF16: T4, V100, P100)
    mem_bandwidth_gbs: float  # memory bandwidth per GPU, GB/s
    interconnect: str  # GPU-to-GPU link within a node
    price_per_gpu_hour: float  # list price, in the catalog's currency
    gpus_per_node: int  # typical node size for this card
    assumed: bool = False  # figures are assumptions (undisclosed hardware), not published data
    note: str = ""


@dataclass(frozen=True, slots=True)
class Catalog:
    """Every known card type, the reference card estimates are stated on, and the price currency."""

    cards: Mapping[str, CardSpec]
    reference: str
    currency: str
    version: str = "1"
    price_basis: str = ""
    _names: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.reference not in self.cards:
            raise ValueError(f"reference card {self.reference!r} is not in the catalog")
        object.__setattr__(self, "_names", tuple(sorted(self.cards)))

    def card(self, card_type: str) -> CardSpec:
        """The card's figures; a KeyError naming the known card types otherwise."""
        try:
            return self.cards[card_type]
        except KeyError:
            raise KeyError(f"unknown card type {card_type!r}; known: {', '.join(self._names)}") from None

    @property
    def reference_card(self) -> CardSpec:
        return self.cards[self.reference]

    @property
    def names(self) -> tuple[str, ...]:
        """Card type names, sorted."""
        return self._names

    def __contains__(self, card_type: object) -> bool:
        return card_type in self.cards

    def __iter__(self) -> Iterator[CardSpec]:
        return (self.cards[name] for name in self._names)

    def __len__(self) -> int:
        return len(self.cards)
