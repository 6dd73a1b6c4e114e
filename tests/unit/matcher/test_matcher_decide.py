"""The matcher's pure decision: verdicts per card, ranking over the live fleet, unmatchable causes."""

from __future__ import annotations

import dataclasses

import pytest

from services.matcher.decide import NO_FLEET_DETAIL, Fleet, catalog_fingerprint, decide
from shared.cards import load_catalog
from shared.events.reasons import UnmatchableReason as U

from .builders import a_request

CATALOG = load_catalog()


def hand_cost(card_type: str, gpu_hours: float, gpus: int) -> float:
    """Compute-bound cost by hand: reference runtime / TFLOPS ratio x GPUs x price."""
    card, reference = CATALOG.card(card_type), CATALOG.reference_card
    runtime_s = gpu_hours * 3600 / gpus / (card.bf16_tflops / reference.bf16_tflops)
    return runtime_s * gpus * card.price_per_gpu_hour / 3600


def test_ranks_only_fleet_card_types_and_chooses_the_cheapest() -> None:
    fleet = Fleet({"H100": 8, "A10": 4, "L40S": 8})
    decision = decide(a_request(gpus=1, min_vram_gb=20, estimate_gpu_hours=2), CATALOG, fleet)

    assert decision.matched and decision.unmatchable is None and not decision.waits_for_fleet
    ranked = [e.card_type for e in decision.result.ranked]
    assert sorted(ranked) == ["A10", "H100", "L40S"]
    expected = min(ranked, key=lambda card: hand_cost(card, 2, 1))
    assert decision.result.chosen.card_type == expected
    assert decision.result.chosen.cost == pytest.approx(hand_cost(expected, 2, 1))
    assert decision.detail == decision.result.reason


def test_every_inadequate_card_says_why_not() -> None:
    fleet = Fleet({"H100": 8, "A10": 4, "L40S": 2})
    decision = decide(a_request(gpus=4, min_vram_gb=40, deny=frozenset({"H200"})), CATALOG, fleet)
    why = {v.card_type: v.why_not for v in decision.verdicts}

    assert why["H100"] == ""
    assert why["H200"] == "denied by the task"
    assert why["A10"] == "24 GB VRAM < 40 GB needed"
    assert why["L40S"] == "the fleet has 2 GPU(s) of it, 4 needed"
    assert why["A100-80G"] == "not in the fleet"
    assert [v.card_type for v in decision.verdicts] == sorted(why)


@pytest.mark.parametrize(
    ("request_args", "fleet", "reason", "waits", "phrases"),
    [
        ({}, {}, U.NO_FLEET, True, [NO_FLEET_DETAIL]),
        (
            {"min_vram_gb": 200},
            {"H100": 8},
            U.INSUFFICIENT_VRAM,
            False,
            ["needs 200 GB VRAM per GPU", "the largest card in the fleet (H100) has 80 GB", "largest: H200, 141 GB"],
        ),
        (
            {"min_vram_gb": 100},
            {"H100": 8, "A10": 4},
            U.INSUFFICIENT_VRAM,
            True,
            ["needs 100 GB VRAM per GPU; the largest card in the fleet (H100) has 80 GB", "H200 (141 GB)"],
        ),
        ({"allow": frozenset({"A10"})}, {"H100": 8}, U.NO_ALLOWED_CARD_TYPE, True, ["(H100)", "allow A10"]),
        ({"allow": frozenset({"X1"})}, {"H100": 8}, U.NO_ALLOWED_CARD_TYPE, False, ["allow X1", "no card type of the catalog"]),
        ({"gpus": 16, "min_vram_gb": 70}, {"H100": 8, "A10": 32}, U.TOO_MANY_GPUS, True, ["needs 16 GPUs", "at most 8", "H100: 8"]),
    ],
)
def test_unmatchable_names_the_first_cause(request_args, fleet, reason, waits, phrases) -> None:
    decision = decide(a_request(**request_args), CATALOG, Fleet(fleet))

    assert not decision.matched and decision.result is None
    assert decision.unmatchable == reason
    assert decision.waits_for_fleet is waits
    for phrase in phrases:
        assert phrase in decision.detail
    assert all(not v.adequate for v in decision.verdicts)


def test_a_new_card_type_in_the_fleet_makes_a_waiting_task_matchable() -> None:
    request = a_request(min_vram_gb=100)
    assert decide(request, CATALOG, Fleet({"H100": 8})).waits_for_fleet
    after = decide(request, CATALOG, Fleet({"H100": 8, "H200": 8}))
    assert after.matched and after.result.chosen.card_type == "H200"


def test_fleet_ignores_card_types_without_live_gpus() -> None:
    fleet = Fleet({"H100": 0, "A10": 4})
    assert fleet.card_types == ("A10",) and fleet.gpus("H100") == 0 and bool(Fleet({})) is False


def test_catalog_fingerprint_follows_the_figures() -> None:
    cheaper = dataclasses.replace(CATALOG.card("H100"), price_per_gpu_hour=1.0)
    changed = dataclasses.replace(CATALOG, cards={**CATALOG.cards, "H100": cheaper})
    assert catalog_fingerprint(CATALOG) == catalog_fingerprint(load_catalog())
    assert catalog_fingerprint(changed) != catalog_fingerprint(CATALOG)
