"""`Dispatcher`: what every dispatcher step needs, and `write_step`, the one way a step writes.

A write step of the leader — a batch of events or reports, a cycle, a sweep — runs as:

    async with dc.write_step() as step:          # in-process lock, transaction (its BEGIN checks the epoch)
        book = step.state.book(...)              # memory (+ records loaded for this batch)
        effects = fold(book, ..., step.now)      # pure
        await save(step.conn, effects)           # the same transaction
        step.commit(effects.changes)             # memory takes them over once the transaction commits

Steps are serialised by one in-process lock, so each folds over the state the previous one left;
a cycle waiting for it goes before waiting batches (`step_lock.StepLock`).
If a step fails after it started writing, its outcome is unknown (the commit may or may not have
happened): the working set is dropped, and the next step reloads it from the tables.

The dispatcher also keeps its record of report-path outages (`outages`, rules in
`shared.leasing.outage`): a step that fails because PostgreSQL is unreachable starts one, the next
step that commits ends it; the dispatch loop's Redis probe does the same for Redis (`watch_redis`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from services.common.runtime import Emitter
from services.config.holder import DocumentHolder, PolicyInForce, policy_in_force_holder
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.leader import FencedTransaction
from services.dispatcher.step_lock import StepLock
from services.dispatcher.store import load_everything
from services.dispatcher.working_set import WorkingSet
from shared.events import utcnow
from shared.leasing.outage import OutageSource, OutageWatch, behind_on_reports


from shared.leasing.idle import IdleRule
from shared.leasing.work import LeaseRules
from shared.logging import get_logger
from shared.names import DISPATCHER_GROUP, REPORTS_STREAM
from shared.config import PolicyDocument
from shared.config.governance import IdleReclaimSection
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
    write_lock: StepLock = field(default_factory=StepLock)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    state: WorkingSet | None = None  # None: (re)load before the next step
    reloads: int = 0
    redis: Redis | None = None  # probed every tick (`watch_redis`); None: no probe (tests)
    estimated_at: datetime | None = None  # the last estimate of the queue's starts (`estimates_due`)
    policies: DocumentHolder[PolicyInForce] = field(init=False)
    outages: OutageWatch = field(init=False)

    def __post_init__(self) -> None:
        self.policies = policy_in_force_holder(fallback=self.config.policy_in_force())
        self.outages = OutageWatch(self.rules)
        self.outages.took_over(utcnow())  # whatever came before this leader: an outage of unknown start

    @property
    def policy(self) -> Policy:
        """The `policy` document in force (hot reloaded each cycle); before it is seeded, the preset
        with the `CARDFLOW_DISPATCHER_*` overrides."""
        return self.policies.value.scheduling

    @property
    def governance(self) -> PolicyDocument:
        """The same document, whole: its approvals, reviewers, deadlines, idle reclaim and alerts sections."""
        return self.policies.value.document

    @property
    def policy_version(self) -> int | None:
        """The version of the `policy` document `policy` is (None: the env preset, not yet seeded)."""
        return self.policies.version

    @property
    def rules(self) -> LeaseRules:
        """The folds' timings (`CARDFLOW_DISPATCHER_*`), the policy's idle reclaim and report rate caps."""
        return replace(self.config.lease_rules(), idle=idle_rule(self.governance.idle_reclaim),
                       reports=self.governance.reports)

    @property
    def emitter(self) -> Emitter:
        return Emitter(self.schema, self.producer, self.actor)

    @contextlib.asynccontextmanager
    async def write_step(self, *, urgent: bool = False) -> AsyncIterator[Step]:
        """A write step of the leader (see the module docstring); `urgent` ones (the cycle) go
        before the batches waiting for the lock (`StepLock`)."""
        async with self.write_lock.hold(urgent=urgent):
            try:
                async with self.pool.acquire() as conn:
                    async with FencedTransaction(conn, self.schema, self.epoch):  # BEGIN + epoch check: one round trip
                        if self.state is None:
                            self.state = await load_everything(conn, self.schema, self.config.renewal_event_every_s)
                            self.reloads += 1
                            log.info("working set loaded", tasks=len(self.state.tasks), leases=len(self.state.leases),
                                     nodes=len(self.state.nodes), reloads=self.reloads)
                        step = Step(conn, self.state, utcnow())
                        yield step
                    for apply in step._after_commit:
                        apply(self.state)
            except BaseException as error:
                self.state = None  # the step's outcome is unknown: reload before the next one
                if is_unreachable(error):
                    self.source_down(OutageSource.POSTGRES, error)
                raise
            self.source_up(OutageSource.POSTGRES)

    async def watch_redis(self, timeout_s: float = 2.0) -> None:
        """Probe Redis (the report path's first half); a failure starts an outage, success ends it."""
        if self.redis is None:
            return
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: on 3.11 it can lose a cancel (shared.event_wait)
                await self.redis.ping()
            async with asyncio.timeout(timeout_s):
                first_unread = await self._first_unread_report()
        except (RedisError, OSError, TimeoutError) as error:
            self.source_down(OutageSource.REDIS, error)
            return
        self.source_up(OutageSource.REDIS)
        if behind_on_reports(first_unread, utcnow(), self.rules):
            self.source_down(OutageSource.BACKLOG, RuntimeError(f"unread reports since {first_unread}"))
        else:
            self.source_up(OutageSource.BACKLOG)

    async def _first_unread_report(self) -> str | None:
        """The id of the oldest `cf:reports` entry the dispatcher's group has not read yet (None: none)."""
        assert self.redis is not None
        try:
            groups = await self.redis.xinfo_groups(REPORTS_STREAM)
        except ResponseError:  # no cf:reports yet: no agent has reported
            return None
        mine = next((g for g in groups if _text(g["name"]) == DISPATCHER_GROUP), None)
        if mine is None:
            return None
        entries = await self.redis.xrange(REPORTS_STREAM, min=f"({_text(mine['last-delivered-id'])}", count=1)
        return _text(entries[0][0]) if entries else None

    def source_down(self, source: OutageSource, error: BaseException) -> None:
        if self.outages.down(source, utcnow()):
            log.warning("report path down: leases do not expire and nodes are not lost until it is back",
                        source=source.value, error=repr(error))

    def source_up(self, source: OutageSource) -> None:
        ended = self.outages.up(source, utcnow())
        if ended is not None:
            log.warning("report path back: leases alive when it went down get a TTL plus the claim delay",
                        sources=sorted(ended.sources), outage_s=ended.duration_s, grace_until=ended.grace_end(self.rules))

    def estimates_due(self, now: datetime, *, mark: bool = True) -> bool:
        """True (and noted, unless `mark` is False) when the queue's starts were last estimated
        `estimate_every_s` ago or more."""
        if self.estimated_at is not None and (now - self.estimated_at).total_seconds() < self.config.estimate_every_s:
            return False
        if mark:
            self.estimated_at = now
        return True

    def request_cycle(self) -> None:
        """Something relevant changed: run a cycle soon (debounced by the dispatch loop)."""
        self.wake.set()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def is_unreachable(error: BaseException) -> bool:
    """Did this step fail because PostgreSQL could not be reached (not because of what it did)?"""
    return isinstance(error, OSError | TimeoutError | asyncpg.PostgresConnectionError
                      | asyncpg.exceptions.OperatorInterventionError | asyncpg.InterfaceError)


def idle_rule(section: IdleReclaimSection) -> IdleRule:
    """The fold's `IdleRule` from the policy document's `idle_reclaim` section."""
    return IdleRule(enabled=section.enabled, threshold_pct=section.threshold_pct, window_s=section.window_s,
                    grace_s=section.grace_s, hold_after=section.hold_after)
