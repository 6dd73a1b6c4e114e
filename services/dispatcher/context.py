"""`Dispatcher`: what every dispatcher step needs — pool, schema, identity, config, epoch, locks.

All writes of one dispatcher process go through `writing()`: one transaction, serialised by a
process-wide lock (handlers, the cycle and the sweep never deadlock on each other's rows), that
first re-checks the leader epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime

import asyncpg

from services.dispatcher.config import DispatcherConfig
from services.dispatcher.emitting import EventBatch
from services.dispatcher.leader import check_epoch
from shared.events import utcnow
from shared.scheduling.model import Policy
from shared.scheduling.policies import get_policy


@dataclass
class Dispatcher:
    pool: asyncpg.Pool
    schema: str
    producer: str
    actor: str
    config: DispatcherConfig
    epoch: int
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def policy(self) -> Policy:
        """The configured preset, with the preemption and filling knobs the configuration overrides."""
        config, changes = self.config, {}
        if config.preempt_after_s is not None:
            changes["preempt_after_s"] = config.preempt_after_s
        if config.preempt_max_lost_gpu_hours is not None:
            changes["preempt_max_lost_gpu_hours"] = config.preempt_max_lost_gpu_hours
        if config.fill_reservations is not None:
            changes["fill_reservations"] = config.fill_reservations
        return replace(get_policy(config.policy), **changes)

    def batch(self, now: datetime | None = None) -> EventBatch:
        """An empty batch of events stamped `now` (default: the current time)."""
        return EventBatch(self.schema, self.producer, self.actor, now or utcnow())

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[asyncpg.Connection]:
        """A write transaction of the leader: serialised in-process, epoch checked first."""
        async with self.write_lock, self.pool.acquire() as conn, conn.transaction():
            await check_epoch(conn, self.schema, self.epoch)
            yield conn

    def request_cycle(self) -> None:
        """Something relevant changed: run a cycle soon (debounced by the cycle loop)."""
        self.wake.set()
