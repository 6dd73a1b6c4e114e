"""A new card catalog in force (`config.changed` of `cards`): open, waiting and unmatchable tasks (pure)."""

from __future__ import annotations

from dataclasses import replace

from services.matcher.batch import MatcherConfig, NodeState, TaskRow, fold_batch
from services.matcher.decide import catalog_fingerprint
from services.matcher.request import build_request
from shared.cards import CardSpec, Catalog, load_catalog
from shared.events import TaskMatchedData, TaskUnmatchableData

from .builders import T0, a_submission, catalog_changed

OLD = load_catalog()
OLD_CONFIG = MatcherConfig(OLD, catalog_fingerprint(OLD))
FLEET = {"n1": NodeState("n1", "agent-n1", "H100", 8, True, T0), "n2": NodeState("n2", "agent-n2", "L40S", 8, True, T0)}


def new_catalog(**l40s_changes: float) -> MatcherConfig:
    """Version 2: the same catalog with other L40S figures (e.g. a contract price)."""
    cards = {**OLD.cards, "L40S": replace(OLD.card("L40S"), **l40s_changes)}
    catalog = Catalog(cards=cards, reference=OLD.reference, currency=OLD.currency, version="2")
    return MatcherConfig(catalog, catalog_fingerprint(catalog))


def a_task(task_id: str, status: str, catalog_hash: str, detail: str = "", **submission: object) -> TaskRow:
    return TaskRow(task_id, "proj-a", build_request(a_submission(**submission)), status, "M0", detail, (),
                   catalog_hash)


def test_an_open_task_matched_under_another_catalog_is_ranked_again_with_the_new_prices() -> None:
    config = new_catalog(price_per_gpu_hour=50.0)  # L40S now dearer than H100
    task = a_task("T1", "matched", OLD_CONFIG.catalog_hash, gpus=1, min_vram_gb=20)

    effects = fold_batch([catalog_changed(2)], config, FLEET, [task])

    (emission,) = effects.emissions
    assert isinstance(emission.data, TaskMatchedData) and emission.data.chosen == "H100"
    assert emission.data.catalog_version == "2"
    assert emission.data.reason.startswith("re-matched: card catalog version 2 in force; ")
    (match,) = effects.matches
    assert (match.trigger, match.catalog_version, match.catalog_hash) == ("catalog_changed", "2", config.catalog_hash)
    assert effects.tasks["T1"].last_catalog_hash == config.catalog_hash


def test_an_open_task_already_matched_under_the_catalog_in_force_is_left_alone() -> None:
    config = new_catalog(price_per_gpu_hour=50.0)
    task = a_task("T1", "matched", config.catalog_hash, gpus=1)
    assert fold_batch([catalog_changed(2)], config, FLEET, [task]).emissions == []


def test_an_unmatchable_task_matches_once_the_catalog_knows_a_card_with_the_vram() -> None:
    config = new_catalog(vram_gb=160.0)  # a (fictional) bigger L40S
    task = a_task("T2", "unmatchable", OLD_CONFIG.catalog_hash, "needs 150 GB", gpus=1, min_vram_gb=150)

    effects = fold_batch([catalog_changed(2)], config, FLEET, [task])

    (emission,) = effects.emissions
    assert isinstance(emission.data, TaskMatchedData) and emission.data.chosen == "L40S"
    assert effects.tasks["T2"].status == "matched"


def test_a_waiting_task_whose_reason_is_unchanged_gets_no_new_match() -> None:
    config = new_catalog(price_per_gpu_hour=1.0)
    first = fold_batch([catalog_changed(2)], config, {}, [a_task("T3", "waiting", OLD_CONFIG.catalog_hash, gpus=1)])
    (emission,) = first.emissions
    assert isinstance(emission.data, TaskUnmatchableData)
    again = replace(first.tasks["T3"])
    assert fold_batch([catalog_changed(3)], config, {}, [again]).emissions == []


def test_a_policy_change_does_not_touch_matches() -> None:
    config = new_catalog(price_per_gpu_hour=50.0)
    task = a_task("T1", "matched", OLD_CONFIG.catalog_hash, gpus=1)
    assert fold_batch([catalog_changed(2, name="policy")], config, FLEET, [task]).emissions == []
