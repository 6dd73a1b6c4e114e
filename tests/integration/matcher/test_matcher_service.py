"""The matcher service against real Redis and PostgreSQL: stored matches, matched/unmatchable, re-match."""

from __future__ import annotations

import pytest

from services.matcher.service import build_spec
from shared.events import TaskMatched, TaskUnmatchable
from shared.events.reasons import UnmatchableReason
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.unit.matcher.builders import registered, submitted

pytestmark = pytest.mark.integration


async def test_matches_over_the_registered_fleet_and_stores_every_match(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(registered("n1", "H100"), registered("n2", "A10", 4))
        fits = submitted("T-fit", gpus=1, min_vram_gb=20)
        too_big = submitted("T-big", gpus=1, min_vram_gb=200)
        await running.publish(fits, too_big)

        matched = await running.wait_for_events("task.matched", 1)
        unmatchable = await running.wait_for_events("task.unmatchable", 1)
        rows = await running.fetch("SELECT * FROM matcher.matches ORDER BY task_id")

    assert len(matched) == 1 and isinstance(matched[0], TaskMatched)
    data = matched[0].data
    assert data.task_id == "T-fit" and data.chosen in {"A10", "H100"}
    assert {e.card_type for e in data.ranking} == {"A10", "H100"}
    assert data.ranking[0].card_type == data.chosen
    assert matched[0].causation_id == fits.event_id

    assert isinstance(unmatchable[0], TaskUnmatchable)
    assert unmatchable[0].data.reason is UnmatchableReason.INSUFFICIENT_VRAM
    assert "the largest card in the fleet (H100) has 80 GB" in unmatchable[0].data.detail

    by_task = {row["task_id"]: row for row in rows}
    assert set(by_task) == {"T-fit", "T-big"}
    fit = by_task["T-fit"]
    assert fit["matched"] and fit["chosen"] == data.chosen and fit["event_id"] == matched[0].event_id
    assert fit["fleet_card_types"] == ["A10", "H100"] and fit["fleet"] == {"A10": 4, "H100": 8}
    assert fit["request"]["min_vram_gb"] == 20 and fit["catalog_hash"]
    assert [r["card_type"] for r in fit["ranking"] if r["rank"]] == [e.card_type for e in data.ranking]
    big = by_task["T-big"]
    assert not big["matched"] and big["unmatchable_reason"] == "insufficient_vram" and big["chosen"] is None


async def test_waiting_tasks_are_matched_when_a_fitting_card_type_registers(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(submitted("T-early"))
        (early,) = await running.wait_for_events("task.unmatchable", 1)
        assert early.data.reason is UnmatchableReason.NO_FLEET
        assert early.data.detail == "no GPU node has registered yet"

        await running.publish(registered("n1", "H100"), submitted("T-large", gpus=1, min_vram_gb=120))
        first = await running.wait_for_events("task.matched", 1)
        large = await running.wait_for_events("task.unmatchable", 2)
        assert [e.data.task_id for e in first] == ["T-early"]
        assert large[1].data.task_id == "T-large"

        await running.publish(registered("n2", "H200"))
        matched = await running.wait_for_events("task.matched", 3)  # T-early's ranking gains H200 too
        statuses = await running.fetch("SELECT task_id, status FROM matcher.tasks ORDER BY task_id")
        triggers = await running.fetch("SELECT trigger FROM matcher.matches WHERE task_id = 'T-large' ORDER BY created_at")

    by_task = {e.data.task_id: e.data for e in matched[1:]}
    assert by_task["T-large"].chosen == "H200"
    assert [e.card_type for e in by_task["T-early"].ranking] == ["H100", "H200"]
    assert {row["task_id"]: row["status"] for row in statuses} == {"T-early": "matched", "T-large": "matched"}
    assert [row["trigger"] for row in triggers] == ["submitted", "fleet_changed"]


async def test_a_redelivered_submission_is_matched_once(fresh_settings: Settings) -> None:
    event = submitted("T-dup", gpus=1)
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(registered("n1", "L40S"), event, event)
        await running.wait_for_events("task.matched", 1)
        await running.publish(submitted("T-after", gpus=1))
        await running.wait_for_events("task.matched", 2)
        rows = await running.fetch("SELECT task_id FROM matcher.matches ORDER BY task_id")

    assert [row["task_id"] for row in rows] == ["T-after", "T-dup"]


async def test_a_stored_match_is_plain_json_text_kept_uncompressed(fresh_settings: Settings) -> None:
    """A match row (its ranking covers every card type of the catalog: over PostgreSQL's ~2 KB
    compression threshold) is stored as written: json columns, nothing compressed (migration 005)."""
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(registered("n1", "H100"), submitted("T-fit", gpus=1, min_vram_gb=20))
        await running.wait_for_events("task.matched", 1)
        [row] = await running.fetch(
            "SELECT pg_typeof(request)::text || ' ' || pg_typeof(ranking)::text || ' ' || pg_typeof(fleet)::text"
            " || ' ' || pg_typeof(reason_facts)::text AS types, pg_column_compression(ranking) AS compression,"
            " octet_length(m.*::text) AS length, fleet_card_types FROM matcher.matches AS m WHERE task_id = 'T-fit'"
        )
    assert (row["types"], row["compression"], row["fleet_card_types"]) == ("json json json json", None, ["H100"])
    assert row["length"] > 2100
