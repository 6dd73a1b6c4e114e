"""The packaged card catalog: complete, sourced, and loadable; bad files are refused clearly."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import yaml

from shared.cards import CatalogError, load_catalog, parse_catalog
from shared.cards.model import REQUIRED_FIELDS

REQUIRED_CARDS = {"H200", "H100", "A100-80G", "A100-40G", "L40S", "A10", "T4", "V100-32G"}
TRACE_CARDS = {"A10", "T4", "P100", "V100M16", "V100M32", "G2", "G3", "V100"}
RAW = resources.files("shared.cards").joinpath("catalog.yaml").read_text(encoding="utf-8")


def test_catalog_holds_the_required_and_trace_cards():
    catalog = load_catalog()
    assert REQUIRED_CARDS | TRACE_CARDS <= set(catalog.names)
    assert catalog.reference == "A100-80G"
    assert catalog.currency == "USD"


def test_every_card_has_every_field_with_a_positive_figure():
    data = yaml.safe_load(RAW)
    for name, fields in data["cards"].items():
        assert set(REQUIRED_FIELDS) <= set(fields), name
    for card in load_catalog():
        for value in (card.vram_gb, card.bf16_tflops, card.mem_bandwidth_gbs, card.price_per_gpu_hour,
                      card.gpus_per_node):
            assert value > 0, card.card_type
        assert card.interconnect


def test_every_figure_names_its_source_in_a_comment():
    """Each field line of each card carries a comment (datasheet, price list, or ASSUMED)."""
    in_cards = False
    for line in RAW.splitlines():
        if line.startswith("cards:"):
            in_cards = True
            continue
        field = re.match(r"^\s{4}(\w+):", line)
        if in_cards and field and field.group(1) in REQUIRED_FIELDS:
            assert re.search(r"#\s*\S.{8,}", line), f"figure without a source: {line.strip()}"


def test_undisclosed_cards_are_marked_assumed_and_published_ones_are_not():
    catalog = load_catalog()
    assert catalog.card("G2").assumed and catalog.card("G3").assumed
    assert not any(catalog.card(name).assumed for name in REQUIRED_CARDS)


def test_some_datasheet_figures():
    catalog = load_catalog()
    assert catalog.card("H100").bf16_tflops == 989  # dense, not the sparsity figure
    assert catalog.card("A100-80G").mem_bandwidth_gbs == 2039
    assert catalog.card("H200").vram_gb == 141


def test_unknown_card_names_the_known_ones():
    with pytest.raises(KeyError, match="known: A10, A100-40G"):
        load_catalog().card("B200")


def test_load_catalog_from_a_file(tmp_path: Path):
    path = tmp_path / "cards.yaml"
    path.write_text(yaml.safe_dump({"reference": "X", "currency": "EUR", "cards": {"X": _card()}}))
    catalog = load_catalog(path)
    assert catalog.names == ("X",) and catalog.currency == "EUR"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"reference": "X", "currency": "USD"}, "non-empty 'cards'"),
        ({"currency": "USD", "cards": {"X": {}}}, "missing 'reference'"),
        ({"reference": "Y", "currency": "USD", "cards": {"X": None}}, "expected a mapping"),
        ({"reference": "Y", "currency": "USD", "cards": {"X": {"vram_gb": 80}}}, "missing bf16_tflops"),
    ],
)
def test_malformed_catalogs_are_refused_with_the_problem(data, message):
    with pytest.raises(CatalogError, match=message):
        parse_catalog(data)


def test_non_positive_figures_and_unknown_reference_are_refused():
    with pytest.raises(CatalogError, match="price_per_gpu_hour must be a positive number"):
        parse_catalog({"reference": "X", "currency": "USD", "cards": {"X": _card(price_per_gpu_hour=0)}})
    with pytest.raises(CatalogError, match="reference card 'Y'"):
        parse_catalog({"reference": "Y", "currency": "USD", "cards": {"X": _card()}})


def _card(**changes):
    card = {"vram_gb": 80, "bf16_tflops": 300, "mem_bandwidth_gbs": 2000, "interconnect": "NVLink",
            "price_per_gpu_hour": 4.0, "gpus_per_node": 8}
    return {**card, **changes}
