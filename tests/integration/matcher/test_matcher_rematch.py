"""Open matches against real Redis and PostgreSQL: a cheaper card type joining the fleet re-matches
tasks not yet granted (new stored match, new `task.matched`); granted tasks keep their match."""

from __future__ import annotations

import pytest

from services.common.runtime import Emitter, prepare_schema
from services.dispatcher.service import SPEC as DISPATCHER
from services.dispatcher.store import load_tasks, save_changes
from services.matcher.match_reasons import match_reason_text
from services.matcher.service import build_spec
from shared.delivery.db import create_pool
from shared.events import TaskMatched, utcnow
from shared.leasing.records import LeaseBook
from shared.leasing.task_facets import apply_events
from shared.leasing.work import LeaseRules
from shared.projection import fold, replay_order
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.unit.ledger.builders import granted, succeeded
from tests.unit.matcher.builders import registered, submitted

pytestmark = pytest.mark.integration

SMALL = {"gpus": 1, "min_vram_gb": 20}  # runs on H100 and on the much cheaper L40S


async def status_of(running: RunningServices, task_id: str) -> str | None:
    rows = await running.fetch("SELECT status FROM matcher.tasks WHERE task_id = $1", task_id)
    return rows[0]["status"] if rows else None


async def test_a_cheaper_card_type_joining_rematches_an_open_task(fresh_settings: Settings) -> None:
    task = submitted("T-small", **SMALL)
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(registered("n1", "H100"), task)
        (first,) = await running.wait_for_events("task.matched", 1)
        assert first.data.chosen == "H100" and [e.card_type for e in first.data.ranking] == ["H100"]

        join = registered("n2", "L40S")
        await running.publish(join)
        matched = await running.wait_for_events("task.matched", 2)
        matches = await running.fetch("SELECT * FROM matcher.matches WHERE task_id = 'T-small' ORDER BY match_id")
        (row,) = await running.fetch("SELECT status, last_match_id, last_ranked FROM matcher.tasks")

    second = matched[1]
    assert second.data.task_id == "T-small" and second.data.chosen == "L40S"
    assert [e.card_type for e in second.data.ranking] == ["L40S", "H100"]
    assert second.data.reason.startswith("re-matched: L40S joined the fleet; ")
    assert second.causation_id == join.event_id and second.subject_seq > first.subject_seq

    assert [m["chosen"] for m in matches] == ["H100", "L40S"]  # every match kept
    assert [m["trigger"] for m in matches] == ["submitted", "fleet_changed"]
    assert [m["event_id"] for m in matches] == [first.event_id, second.event_id]
    assert matches[1]["reason"] == second.data.reason and matches[1]["fleet"] == {"H100": 8, "L40S": 8}
    assert row["status"] == "matched" and row["last_match_id"] == matches[1]["match_id"]
    assert row["last_ranked"] == ["L40S", "H100"]
    # the numbers behind the sentence are stored beside it, so the console says it in Chinese
    facts = matches[1]["reason_facts"]
    assert facts["chosen"] == "L40S" and facts["next"]["card_type"] == "H100" and facts["again"] == {
        "trigger": "fleet_changed", "card_type": "L40S"}  # fmt: skip
    assert match_reason_text(matches[1], "zh").startswith("重新匹配：L40S 加入了集群；L40S 是满足要求的最便宜卡型：")
    assert matches[0]["reason_facts"]["chosen"] == "H100" and "again" not in matches[0]["reason_facts"]

    view = fold(replay_order([task, first, second]))["T-small"]
    assert view.match is not None and view.match.card_type == "L40S"
    stale = fold([task, second, first])["T-small"]  # the older match arrives late: ignored
    assert stale.match is not None and stale.match.card_type == "L40S"
    assert await dispatcher_options(fresh_settings, second, first) == ["L40S", "H100"]


async def test_a_granted_task_keeps_its_match_when_a_cheaper_card_type_joins(fresh_settings: Settings) -> None:
    async with RunningServices(fresh_settings, build_spec()) as running:
        await running.publish(registered("n1", "H100"), submitted("T-open", **SMALL), submitted("T-leased", **SMALL))
        await running.wait_for_events("task.matched", 2)

        await running.publish(granted("L1", "T-leased", gpus=1))
        assert await running.wait_until(lambda: _has_status(running, "T-leased", "granted"))
        await running.publish(registered("n2", "L40S"))
        matched = await running.wait_for_events("task.matched", 3)

        await running.publish(succeeded("T-leased", "L1", None))
        assert await running.wait_until(lambda: _has_status(running, "T-leased", "finished"))
        await running.publish(registered("n3", "A10", 4))  # a finished task is not ranked again either
        matched = await running.wait_for_events("task.matched", 4)
        counts = await running.fetch("SELECT task_id, count(*) AS n FROM matcher.matches GROUP BY task_id")

    assert [(e.data.task_id, e.data.chosen) for e in matched[2:]] == [("T-open", "L40S"), ("T-open", "L40S")]
    assert {e.card_type for e in matched[3].data.ranking} == {"L40S", "A10", "H100"}
    assert {row["task_id"]: row["n"] for row in counts} == {"T-open": 3, "T-leased": 1}


async def dispatcher_options(settings: Settings, *matched: TaskMatched) -> list[str]:
    """The card types the dispatcher's options facet holds after upserting `matched`, one batch each."""
    async with await create_pool(settings.database_dsn or "", min_size=1, max_size=1) as pool:
        await prepare_schema(pool, DISPATCHER)
        async with pool.acquire() as conn:
            for event in matched:
                async with conn.transaction():
                    book = LeaseBook(tasks=await load_tasks(conn, "dispatcher", ["T-small"]))
                    effects = apply_events(book, [event], utcnow(), LeaseRules())
                    await save_changes(conn, "dispatcher", Emitter("dispatcher", "tests/1", "test"), effects.changes)
            options = await conn.fetchval("SELECT options FROM dispatcher.tasks WHERE task_id = $1", "T-small")
    return [option[0] for option in options]


async def _has_status(running: RunningServices, task_id: str, status: str) -> bool:
    return await status_of(running, task_id) == status
