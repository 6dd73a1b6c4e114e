"""The leader's working set: loaded from the tables, followed by committed steps, dropped after a gap."""

from __future__ import annotations

import pytest

from services.common.runtime import prepare_schema
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.context import Dispatcher
from services.dispatcher.event_handler import handle_events
from services.dispatcher.service import SPEC
from shared.delivery.db import create_pool
from shared.settings import Settings
from tests.unit.dispatcher.builders import a_ready_task


async def test_a_failed_step_drops_the_working_set_and_the_next_step_reloads_it(fresh_settings: Settings) -> None:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=2) as pool:
        await prepare_schema(pool, SPEC)
        dc = Dispatcher(pool, "dispatcher", "dispatcher/test", "service:dispatcher", DispatcherConfig(), epoch=0)
        await handle_events(dc, a_ready_task("T1"))
        assert dc.state is not None and [t.task_id for t in dc.state.plan_queue()] == ["T1"] and dc.reloads == 1

        with pytest.raises(RuntimeError):
            async with dc.write_step() as step:
                await step.conn.execute("UPDATE dispatcher.tasks SET priority = 7 WHERE task_id = 'T1'")
                raise RuntimeError("the step failed after it wrote: its outcome is unknown")
        assert dc.state is None  # a gap: memory may no longer match the tables

        await pool.execute("UPDATE dispatcher.tasks SET priority = 9 WHERE task_id = 'T1'")  # as if a commit had landed
        await handle_events(dc, a_ready_task("T2"))
        assert dc.reloads == 2 and dc.state is not None
        assert {t.task_id: t.priority for t in dc.state.plan_queue()} == {"T1": 9, "T2": 0}


async def test_a_committed_step_keeps_memory_and_tables_equal(fresh_settings: Settings) -> None:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=2) as pool:
        await prepare_schema(pool, SPEC)
        dc = Dispatcher(pool, "dispatcher", "dispatcher/test", "service:dispatcher", DispatcherConfig(), epoch=0)
        await handle_events(dc, [*a_ready_task("T1"), *a_ready_task("T2", gpus=2)])
        in_memory = dict(dc.state.tasks) if dc.state else {}
        dc.state = None
        async with dc.write_step() as step:
            reloaded = dict(step.state.tasks)
    assert reloaded == in_memory and set(reloaded) == {"T1", "T2"}
