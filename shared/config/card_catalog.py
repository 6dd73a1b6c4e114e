"""The `cards` document: the card catalog as a versioned configuration document.

Its YAML is exactly the packaged `shared/cards/catalog.yaml` format (version 1 of `cards` IS that
file, comments and all). `CardsDocument` validates it with every problem named (field, value,
expected); `catalog_of` turns a valid document into the `Catalog` the matcher ranks with, labelled
with the config version it came from, so every match records which catalog version it used.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from shared.cards import Catalog, parse_catalog
from shared.submission.fields import CardTypeName

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _number_as_text(value: Any) -> Any:
    """YAML reads `version: 2024.1` as a number; the label is text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class CardFigures(BaseModel):
    """One card type's figures (per GPU)."""

    model_config = _FROZEN

    vram_gb: float = Field(gt=0, description="memory per GPU, GB")
    bf16_tflops: float = Field(gt=0, description="dense BF16 tensor TFLOPS (FP16 for cards without BF16)")
    mem_bandwidth_gbs: float = Field(gt=0, description="memory bandwidth per GPU, GB/s")
    interconnect: str = Field(min_length=1, max_length=200, description="GPU-to-GPU link within a node")
    price_per_gpu_hour: float = Field(gt=0, description="price per GPU-hour in the catalog's currency")
    gpus_per_node: int = Field(ge=1, description="typical node size for this card")
    assumed: bool = Field(False, description="figures are assumptions, not published data")
    note: str = Field("", max_length=2000)


class CardsDocument(BaseModel):
    """`cards.yaml`: every known card type, the reference card estimates are stated on, the currency."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, title="cardflow card catalog document")

    version: Annotated[str, BeforeValidator(_number_as_text)] = Field(
        "1", min_length=1, max_length=100, description="a label of the figures' edition (free text)"
    )
    currency: str = Field(min_length=1, max_length=20, description="currency of every price, e.g. USD or CNY")
    price_basis: str = Field("", max_length=2000, description="where the prices come from")
    cards: dict[CardTypeName, CardFigures] = Field(min_length=1, description="card type -> figures")
    reference: CardTypeName = Field(description="the card task estimates are stated on; one of `cards`")

    @field_validator("reference")
    @classmethod
    def _reference_is_a_card(cls, value: str, info: ValidationInfo) -> str:
        cards = info.data.get("cards")
        if cards is not None and value not in cards:
            raise ValueError(f"one of the catalog's card types ({', '.join(sorted(cards))})")
        return value


def catalog_of(document: CardsDocument, config_version: int | str) -> Catalog:
    """The `Catalog` of a valid document; `Catalog.version` is the config version (e.g. "3")."""
    body = document.model_dump(mode="python")
    return parse_catalog({**body, "version": str(config_version)}, source=f"cards@{config_version}")
