"""The leader epoch fence on every write step (`leader.FencedTransaction`): a deposed leader writes nothing,
and a takeover waits for the step that passed the check."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.common.runtime import prepare_schema
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.context import Dispatcher
from services.dispatcher.event_handler import handle_events
from services.dispatcher.leader import LeadershipLost
from services.dispatcher.service import SPEC
from shared.delivery.db import create_pool
from shared.settings import Settings
from tests.unit.dispatcher.builders import a_ready_task

TAKEOVER = "UPDATE dispatcher.leader SET epoch = epoch + 1 WHERE id = 1"


@pytest.fixture
async def pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=3) as pool:
        await prepare_schema(pool, SPEC)
        yield pool


def a_leader(pool: asyncpg.Pool, epoch: int = 0) -> Dispatcher:
    return Dispatcher(pool, "dispatcher", "dispatcher/test", "service:dispatcher", DispatcherConfig(), epoch=epoch)


async def test_a_deposed_leader_writes_nothing(pool: asyncpg.Pool) -> None:
    dc = a_leader(pool)
    await handle_events(dc, a_ready_task("T1"))
    await pool.execute(TAKEOVER)  # another instance took over

    with pytest.raises(LeadershipLost, match="leader epoch is 1, this instance holds 0"):
        await handle_events(dc, a_ready_task("T2"))

    assert [r["task_id"] for r in await pool.fetch("SELECT task_id FROM dispatcher.tasks")] == ["T1"]
    assert await pool.fetchval("SELECT count(*) FROM dispatcher.outbox WHERE subject LIKE '%T2%'") == 0
    async with pool.acquire() as conn:  # the connection went back to the pool clean
        assert not conn.is_in_transaction()


async def test_a_takeover_waits_for_the_step_that_passed_the_check(pool: asyncpg.Pool) -> None:
    dc = a_leader(pool)
    async with pool.acquire() as rival:
        async with dc.write_step() as step:
            await step.conn.execute("UPDATE dispatcher.tasks SET priority = 1")
            takeover = asyncio.create_task(rival.execute(TAKEOVER))
            await _until_done_or_waiting_on_a_lock(pool, rival.get_server_pid(), takeover)
            assert not takeover.done()  # the step's share lock on the epoch row holds the new leader back
        await takeover
    with pytest.raises(LeadershipLost):
        async with dc.write_step():
            pass


async def test_a_transaction_nested_in_a_step_is_a_savepoint(pool: asyncpg.Pool) -> None:
    dc = a_leader(pool)
    await handle_events(dc, a_ready_task("T1"))
    async with dc.write_step() as step:
        await step.conn.execute("UPDATE dispatcher.tasks SET priority = 3")
        with pytest.raises(RuntimeError):
            async with step.conn.transaction():
                await step.conn.execute("UPDATE dispatcher.tasks SET priority = 4")
                raise RuntimeError("only the savepoint is rolled back")
    assert await pool.fetchval("SELECT priority FROM dispatcher.tasks WHERE task_id = 'T1'") == 3


async def _until_done_or_waiting_on_a_lock(pool: asyncpg.Pool, pid: int, statement: asyncio.Task[str]) -> None:
    """Poll until `statement` (run by backend `pid`) has finished or waits for a lock."""
    while not statement.done():
        if await pool.fetchval("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid) == "Lock":
            return
        await asyncio.sleep(0.01)
