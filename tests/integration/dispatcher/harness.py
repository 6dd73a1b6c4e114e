"""Run dispatcher instances in-process against `fresh_settings`; write events and agent reports
to the streams; read leases, events and agent commands back.

    async with DispatcherHarness(settings) as h:
        await h.start()
        await h.publish(*a_ready_task("T1"))
        await h.report(registered("a1", "n1", gpus=2))
        assert await h.wait_until(lambda: ...)
"""

from __future__ import annotations

from typing import Any

import asyncpg

from services.dispatcher.config import DispatcherConfig
from services.dispatcher.service import make_spec
from shared.delivery.wire import extract_body
from shared.events import Envelope, parse_command
from shared.names import REPORTS_STREAM, agent_inbox
from tests.helpers.running_services import RunningServices

# Preempting at once, whatever the victim loses: the tests check the mechanics (one test checks the grace).
FAST = DispatcherConfig(lease_ttl_s=30.0, tick_s=0.2, debounce_s=0.02, renewal_event_every_s=5.0, leader_poll_s=0.1,
                        preempt_after_s=0.0, preempt_max_lost_gpu_hours=1e9)


class DispatcherHarness(RunningServices):
    """`async with`: a Redis client and a pool for the test; `start()` runs a dispatcher instance."""

    def start(self, name: str = "a", config: DispatcherConfig = FAST) -> None:
        """Start a dispatcher instance called `name` (its producer is `dispatcher/<name>-<pid>`)."""
        self.start_service(name, make_spec(config), self.settings.model_copy(update={"instance": name}))

    async def stop(self, name: str = "a") -> None:
        await self.stop_service(name)

    async def report(self, *reports: Envelope) -> None:
        """XADD agent reports to `cf:reports` as an agent does."""
        await self.xadd_all(REPORTS_STREAM, *reports)

    async def commands(self, agent_id: str) -> list[Any]:
        """Every command in the agent's inbox `cf:agent:<agent_id>`, oldest first."""
        return [parse_command(extract_body(fields)) for _, fields in await self.redis.xrange(agent_inbox(agent_id))]

    async def wait_for_commands(self, agent_id: str, count: int = 1) -> list[Any]:
        return await self.wait_for_count(lambda: self.commands(agent_id), count)

    async def task_state(self, task_id: str) -> str | None:
        rows = await self.fetch("SELECT state FROM dispatcher.tasks WHERE task_id = $1", task_id)
        return rows[0]["state"] if rows else None

    async def leases(self, task_id: str) -> list[asyncpg.Record]:
        return await self.fetch("SELECT * FROM dispatcher.leases WHERE task_id = $1 ORDER BY granted_at", task_id)
