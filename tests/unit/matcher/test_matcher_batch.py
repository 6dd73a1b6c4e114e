"""Folding a batch of events into the matcher's effects, in stream order (pure)."""

from __future__ import annotations

from services.matcher.batch import MatcherConfig, NodeState, TaskRow, closes_of, fold_batch
from services.matcher.decide import catalog_fingerprint
from services.matcher.request import build_request
from shared.cards import load_catalog
from shared.events import TaskMatchedData, TaskUnmatchableData
from shared.events.reasons import UnmatchableReason

from tests.unit.ledger.builders import granted, succeeded

from .builders import T0, a_submission, cancelled, lost, registered, submitted

CATALOG = load_catalog()
CONFIG = MatcherConfig(CATALOG, catalog_fingerprint(CATALOG))


def a_node(node_id: str, card_type: str, gpus: int = 8) -> NodeState:
    return NodeState(node_id, f"agent-{node_id}", card_type, gpus, True, T0)


def a_waiting_task(task_id: str, detail: str, **submission: object) -> TaskRow:
    return TaskRow(task_id, "proj-a", build_request(a_submission(**submission)), "waiting", "M0", detail)


def test_submitted_then_registered_in_one_batch_waits_then_matches() -> None:
    task = submitted("T1")
    effects = fold_batch([task, registered("n1", "H100")], CONFIG, {}, [])

    first, second = (emission.data for emission in effects.emissions)
    assert isinstance(first, TaskUnmatchableData) and first.reason is UnmatchableReason.NO_FLEET
    assert isinstance(second, TaskMatchedData) and second.chosen == "H100"
    assert [m.trigger for m in effects.matches] == ["submitted", "fleet_changed"]
    assert [m.matched for m in effects.matches] == [False, True]
    assert effects.matches[1].fleet == {"H100": 8}
    assert effects.tasks["T1"].status == "matched" and effects.tasks["T1"].last_match_id == effects.matches[1].match_id
    assert effects.emissions[0].cause is task and effects.nodes["n1"].alive


def test_every_match_is_stored_with_request_ranking_and_catalog() -> None:
    effects = fold_batch([submitted("T1", min_vram_gb=20, gpus=1)], CONFIG, {"n1": a_node("n1", "A10", 4)}, [])
    (match,) = effects.matches

    assert match.request["min_vram_gb"] == 20 and match.chosen == "A10" and match.matched
    assert match.ranking[0] == {
        "card_type": "A10", "rank": 1, "runtime_s": match.ranking[0]["runtime_s"],
        "cost": match.ranking[0]["cost"], "fleet_gpus": 4, "why_not": None, "why_not_code": None, "why_not_facts": None,
    }  # fmt: skip
    assert {row["card_type"] for row in match.ranking} == set(CATALOG.names)
    assert all(row["why_not"] and row["why_not_code"] for row in match.ranking[1:])
    assert match.reason_facts is not None and match.reason_facts["chosen"] == "A10" and match.reason_facts["gpus"] == 1
    assert match.reason_facts["cost"] == match.ranking[0]["cost"] and match.reason_facts["currency"] == CATALOG.currency
    assert (match.catalog_version, match.catalog_hash) == (CATALOG.version, CONFIG.catalog_hash)


def test_a_waiting_task_is_matched_again_when_a_fitting_card_type_registers() -> None:
    waiting = a_waiting_task("T9", "old sentence", min_vram_gb=100)
    effects = fold_batch([registered("n2", "H200")], CONFIG, {"n1": a_node("n1", "H100")}, [waiting])

    (emission,) = effects.emissions
    assert isinstance(emission.data, TaskMatchedData) and emission.data.chosen == "H200"
    assert effects.tasks["T9"].status == "matched"


def test_a_registration_that_does_not_change_the_reason_emits_nothing() -> None:
    nodes = {"n1": a_node("n1", "H100")}
    first = fold_batch([submitted("T1", min_vram_gb=100)], CONFIG, nodes, [])
    row = first.tasks["T1"]
    assert row.status == "waiting"

    again = fold_batch([registered("n1", "H100"), registered("n3", "A10")], CONFIG, nodes, [row])
    assert again.emissions == [] and again.matches == [] and set(again.nodes) == {"n1", "n3"}


def test_more_gpus_of_a_known_type_rematches_a_task_that_needed_them() -> None:
    nodes = {"n1": a_node("n1", "H100")}
    first = fold_batch([submitted("T1", gpus=16, min_vram_gb=70)], CONFIG, nodes, [])
    assert first.emissions[0].data.reason is UnmatchableReason.TOO_MANY_GPUS

    second = fold_batch([registered("n2", "H100")], CONFIG, nodes, [first.tasks["T1"]])
    assert second.emissions[0].data.chosen == "H100"


def test_a_cancelled_task_stops_waiting() -> None:
    effects = fold_batch([submitted("T1"), cancelled("T1"), registered("n1", "H100")], CONFIG, {}, [])
    assert len(effects.emissions) == 1 and effects.tasks["T1"].status == "cancelled"
    assert "T1" in effects.cancelled


def test_a_lost_node_leaves_the_fleet() -> None:
    nodes = {"n1": a_node("n1", "H100")}
    effects = fold_batch([lost("n1"), submitted("T1")], CONFIG, nodes, [])
    assert effects.nodes["n1"].alive is False
    assert effects.emissions[0].data.reason is UnmatchableReason.NO_FLEET


def an_open_match(task_id: str, card_type: str = "H100", **submission: object) -> TaskRow:
    """A task matched over a fleet of `card_type` only, as `matcher.tasks` holds it."""
    effects = fold_batch([submitted(task_id, **submission)], CONFIG, {"n1": a_node("n1", card_type)}, [])
    row = effects.tasks[task_id]
    assert row.status == "matched" and row.last_ranked == (card_type,)
    return row


def test_an_open_match_is_ranked_again_when_a_cheaper_card_type_joins() -> None:
    task = an_open_match("T1", gpus=1, min_vram_gb=20)
    effects = fold_batch([registered("n2", "L40S")], CONFIG, {"n1": a_node("n1", "H100")}, [task])

    (emission,) = effects.emissions
    assert isinstance(emission.data, TaskMatchedData) and emission.data.chosen == "L40S"
    assert [e.card_type for e in emission.data.ranking] == ["L40S", "H100"]
    assert emission.data.reason.startswith("re-matched: L40S joined the fleet; L40S is the cheapest")
    (match,) = effects.matches
    assert (match.trigger, match.chosen, match.reason) == ("fleet_changed", "L40S", emission.data.reason)
    assert effects.tasks["T1"].last_ranked == ("L40S", "H100") and effects.tasks["T1"].status == "matched"


def test_a_registration_that_leaves_the_ranking_alone_does_not_rematch() -> None:
    task = an_open_match("T1", gpus=1, min_vram_gb=60)  # L40S (48 GB) cannot run it
    effects = fold_batch(
        [registered("n2", "H100"), registered("n3", "L40S")], CONFIG, {"n1": a_node("n1", "H100")}, [task]
    )
    assert effects.emissions == [] and effects.matches == []


def test_a_more_expensive_card_type_joining_extends_the_ranking_but_keeps_the_choice() -> None:
    task = an_open_match("T1", "L40S", gpus=1, min_vram_gb=20)
    effects = fold_batch([registered("n2", "H100")], CONFIG, {"n1": a_node("n1", "L40S")}, [task])
    (emission,) = effects.emissions
    assert emission.data.chosen == "L40S" and [e.card_type for e in emission.data.ranking] == ["L40S", "H100"]


def test_a_task_granted_in_the_same_batch_is_not_rematched() -> None:
    task = an_open_match("T1", gpus=1, min_vram_gb=20)
    events = [registered("n2", "L40S"), granted("L1", "T1", gpus=1)]
    effects = fold_batch(events, CONFIG, {"n1": a_node("n1", "H100")}, [task])
    assert effects.emissions == [] and effects.closed == {"T1": "granted"}


def test_closing_events_grant_then_finish_and_finished_is_final() -> None:
    assert closes_of([granted("L1", "T1"), succeeded("T1", "L1", None)]) == {"T1": "finished"}
    assert closes_of([succeeded("T1", "L1", None), granted("L1", "T1")]) == {"T1": "finished"}
    assert closes_of([submitted("T2"), granted("L2", "T2")]) == {"T2": "granted"}
