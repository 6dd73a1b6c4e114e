"""Load the card catalog: the packaged `catalog.yaml`, or an operator's own file.

The catalog is configuration (versioned in object storage in production, see ARCHITECTURE §8); this
module only turns YAML into a validated `Catalog` and says clearly what is wrong with a bad file.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from shared.cards.model import REQUIRED_FIELDS, CardSpec, Catalog

PACKAGED_CATALOG = "catalog.yaml"


class CatalogError(ValueError):
    """The catalog file is malformed: a missing field, a non-positive figure, an unknown reference."""


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The catalog at `path`, or the packaged one (shared/cards/catalog.yaml) if None."""
    if path is None:
        text = resources.files("shared.cards").joinpath(PACKAGED_CATALOG).read_text(encoding="utf-8")
        source = f"shared/cards/{PACKAGED_CATALOG}"
    else:
        text = Path(path).read_text(encoding="utf-8")
        source = str(path)
    return parse_catalog(yaml.safe_load(text), source)


def parse_catalog(data: Any, source: str = "<catalog>") -> Catalog:
    """A validated `Catalog` from already-parsed YAML/JSON data."""
    if not isinstance(data, Mapping) or not isinstance(data.get("cards"), Mapping) or not data["cards"]:
        raise CatalogError(f"{source}: expected a mapping with a non-empty 'cards' mapping")
    for key in ("reference", "currency"):
        if not data.get(key):
            raise CatalogError(f"{source}: missing '{key}'")
    cards = {str(name): _parse_card(str(name), fields, source) for name, fields in data["cards"].items()}
    if data["reference"] not in cards:
        raise CatalogError(f"{source}: reference card {data['reference']!r} is not among the cards")
    return Catalog(
        cards=cards,
        reference=str(data["reference"]),
        currency=str(data["currency"]),
        version=str(data.get("version", "1")),
        price_basis=str(data.get("price_basis", "")),
    )


def _parse_card(name: str, fields: Any, source: str) -> CardSpec:
    if not isinstance(fields, Mapping):
        raise CatalogError(f"{source}: card {name}: expected a mapping of figures")
    missing = [key for key in REQUIRED_FIELDS if key not in fields]
    if missing:
        raise CatalogError(f"{source}: card {name}: missing {', '.join(missing)}")
    numbers = {key: fields[key] for key in REQUIRED_FIELDS if key != "interconnect"}
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise CatalogError(f"{source}: card {name}: {key} must be a positive number, got {value!r}")
    return CardSpec(
        card_type=name,
        vram_gb=float(fields["vram_gb"]),
        bf16_tflops=float(fields["bf16_tflops"]),
        mem_bandwidth_gbs=float(fields["mem_bandwidth_gbs"]),
        interconnect=str(fields["interconnect"]),
        price_per_gpu_hour=float(fields["price_per_gpu_hour"]),
        gpus_per_node=int(fields["gpus_per_node"]),
        assumed=bool(fields.get("assumed", False)),
        note=str(fields.get("note", "")),
    )
