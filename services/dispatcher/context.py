"""`Dispatcher`: what every dispatcher step needs, and `write_step`, the one way a step writes.

A write step of the leader — a batch of events or reports, a cycle, a sweep — runs as:

    async with dc.write_step() as step:          # in-process lock, transaction, epoch checked
        book = step.state.book(...)              # memory (+ records loaded for this batch)
        effects = fold(book, ..., step.now)      # pure
        await save(step.conn, effects)           # the same transaction
        step.commit(effects.changes)             # memory takes them over once the transaction commits

Steps are serialised by one in-process lock, so each folds over the state the previous one left.
If a step fails after it started writing, its outcome is unknown (the commit may or may not have
happened): the working set is dropped, and the next step reloads it from the tables.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from services.common.runtime import Emitter
from services.config.holder import DocumentHolder, policy_holder
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.leader import check_epoch
from services.dispatcher.store import load_everything
from services.dispatcher.working_set import WorkingSet
from shared.events import utcnow
from shared.leasing.work import LeaseRules
from shared.logging import get_logger
from shared.scheduling.model import Policy

log = get_logger(__name__)


@dataclass
class Step:
    """One write step: its connection (inside the transaction), the working set, and its clock."""

    conn: asyncpg.Connection
    state: WorkingSet
    now: datetime
    _after_commit: list[Callable[[WorkingSet], None]] = field(default_factory=list)

    def commit(self, *apply: Callable[[WorkingSet], None]) -> None:
        """Apply these to the working set once the transaction has committed."""
        self._after_commit.extend(apply)


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
    state: WorkingSet | None = None  # None: (re)load before the next step
    reloads: int = 0
    policies: DocumentHolder[Policy] = field(init=False)

    def __post_init__(self) -> None:
        self.policies = policy_holder(fallback=self.config.policy_in_force())

    @property
    def policy(self) -> Policy:
        """The `policy` document in force (hot reloaded each cycle); before it is seeded, the preset
        with the `CARDFLOW_DISPATCHER_*` overrides."""
        return self.policies.value

    @property
    def policy_version(self) -> int | None:
        """The version of the `policy` document `policy` is (None: the env preset, not yet seeded)."""
        return self.policies.version

    @property
    def rules(self) -> LeaseRules:
        return self.config.lease_rules()

    @property
    def emitter(self) -> Emitter:
        return Emitter(self.schema, self.producer, self.actor)

    @contextlib.asynccontextmanager
    async def write_step(self) -> AsyncIterator[Step]:
        """A write step of the leader (see the module docstring)."""
        async with self.write_lock:
            try:
                async with self.pool.acquire() as conn:
                    async with conn.transaction():
                        await check_epoch(conn, self.schema, self.epoch)
                        if self.state is None:
                            self.state = await load_everything(conn, self.schema, self.config.renewal_event_every_s)
                            self.reloads += 1
                            log.info("working set loaded", tasks=len(self.state.tasks), leases=len(self.state.leases),
                                     nodes=len(self.state.nodes), reloads=self.reloads)
                        step = Step(conn, self.state, utcnow())
                        yield step
                    for apply in step._after_commit:
                        apply(self.state)
            except BaseException:
                self.state = None  # the step's outcome is unknown: reload before the next one
                raise

    def request_cycle(self) -> None:
        """Something relevant changed: run a cycle soon (debounced by the dispatch loop)."""
        self.wake.set()
