"""`Dispatcher`: what every dispatcher step needs, and `write_step`, the one way a step writes.

A write step of the leader — a batch of events or reports, a cycle, a sweep — runs in two phases:

    async with dc.write_step() as step:          # DECIDE, under the in-process lock, in a transaction
        ...                                      #   (its BEGIN checks the epoch); inbox rows, reads
        book = step.state.book(await step.load_tasks(ids))   # memory (+ records loaded for this batch)
        effects = fold(book, ..., step.now)      # pure
        step.write(effects.changes, lambda conn, stored: save(conn, effects, stored), read=book)
    # PERSIST: the saves, then the commit, once the step before has committed (after the lock if steps overlap)

Deciding is serialised by one in-process lock (a cycle waiting for it goes before waiting batches,
`step_lock.StepLock`), and the working set takes a step's changes as soon as it has decided, so each
step decides over the state the previous ones left — while the previous one still writes and commits.
Commits happen strictly in the order the steps decided (`commit_order.CommitOrder`), and a step's
saves start only after the step before it committed, so the tables, the outbox's order and the
events' subject numbers are those of serial steps. If a step fails (its writes, its commit, or its
outcome is unknown), the working set is dropped, every step decided on top of it is aborted
(`StepAborted`: rolled back, none of its rows or events visible; its batch is redelivered), and the
next step reloads the working set from the tables once no step is pending. A step reading records
missing from memory first waits for the pending steps that changed them (`Step.load_tasks`).
How many decided steps may wait for their commit is `DispatcherConfig.steps_in_flight`: with 2 (the
default) the next step decides while this one persists; with 1 a step persists before it lets go of the lock,
so steps are serial.

The dispatcher also keeps its record of report-path outages (`outages`, rules in
`shared.leasing.outage`): a step that fails because PostgreSQL is unreachable starts one, the next
step that commits ends it; the dispatch loop's Redis probe does the same for Redis (`watch_redis`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from services.common.runtime import Emitter
from services.config.holder import DocumentHolder, PolicyInForce, policy_in_force_holder
from services.dispatcher.commit_order import CommitOrder, Pending, StepAborted
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.leader import FencedTransaction
from services.dispatcher.step_lock import StepLock
from services.dispatcher.store import load_everything, load_leases, load_tasks
from services.dispatcher.working_set import WorkingSet
from shared.events import utcnow
from shared.leasing.outage import OutageSource, OutageWatch, behind_on_reports


from shared.leasing.idle import IdleRule
from shared.leasing.records import LeaseBook, LeaseRecord, QuotaRecord, TaskRecord
from shared.leasing.work import BookChanges
from shared.leasing.work import LeaseRules
from shared.logging import get_logger
from shared.names import DISPATCHER_GROUP, REPORTS_STREAM
from shared.config import PolicyDocument
from shared.config.governance import IdleReclaimSection
from shared.scheduling.policy_knobs import Policy

log = get_logger(__name__)


Save = Callable[[asyncpg.Connection, LeaseBook | None], Awaitable[object]]


@dataclass
class Step:
    """One write step: its connection (inside the transaction), the working set, its clock, and what it
    will write once it has decided."""

    conn: asyncpg.Connection
    state: WorkingSet
    now: datetime
    dispatcher: Dispatcher
    generation: int  # of the working set it decides over (`Dispatcher.drop_state` moves it on)
    saves: list[Callable[[asyncpg.Connection], Awaitable[object]]] = field(default_factory=list)
    kept: list[tuple[BookChanges, Mapping[str, QuotaRecord] | None]] = field(default_factory=list)

    def write(self, changes: BookChanges, save: Save, *, read: LeaseBook | None = None,
              accounts: Mapping[str, QuotaRecord] | None = None) -> None:
        """Decided: `save(conn, stored)` writes `changes` once the step before has committed
        (`stored`: the stored versions of the records it writes, as `read` holds them now, or None: none
        known); the working set takes `changes` (and `accounts`) over when the decide phase ends."""
        stored = None if read is None else stored_versions(read, changes)
        self.saves.append(lambda conn: save(conn, stored))
        self.kept.append((changes, accounts))

    def then(self, save: Callable[[asyncpg.Connection], Awaitable[object]]) -> None:
        """One more write after the ones before, in this step's transaction (no records of the working set)."""
        self.saves.append(save)

    async def load_tasks(self, task_ids: Collection[str]) -> dict[str, TaskRecord]:
        """Tasks missing from memory, from the tables — once no pending step changes them."""
        if not task_ids:
            return {}
        await self.dispatcher.commits.settled(tasks=task_ids)
        return await load_tasks(self.conn, self.dispatcher.schema, task_ids)

    async def load_leases(self, lease_ids: Collection[str]) -> dict[str, LeaseRecord]:
        """Leases missing from memory (ended ones), from the tables — once no pending step changes them."""
        if not lease_ids:
            return {}
        await self.dispatcher.commits.settled(leases=lease_ids)
        return await load_leases(self.conn, self.dispatcher.schema, lease_ids)

    def touched(self) -> tuple[set[str], set[str]]:
        """The task and lease ids this step changes."""
        tasks = {task_id for changes, _ in self.kept for task_id in changes.tasks}
        leases = {lease_id for changes, _ in self.kept for lease_id in [*changes.leases, *changes.quiet_leases]}
        return tasks, leases


def stored_versions(read: LeaseBook, changes: BookChanges) -> LeaseBook:
    """The versions `read` holds now of the records `changes` writes (a copy: memory moves on before the write)."""
    return LeaseBook(
        tasks={i: read.tasks[i] for i in changes.tasks if i in read.tasks},
        leases={i: read.leases[i] for i in changes.leases if i in read.leases},
        nodes={i: read.nodes[i] for i in changes.nodes if i in read.nodes},
    )


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
    generation: int = 0  # moves on each time the working set is dropped
    commits: CommitOrder = field(default_factory=CommitOrder)
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
        """A write step of the leader (see the module docstring); `urgent` ones (the cycle) decide
        before the batches waiting for the lock (`StepLock`)."""
        async with self.write_lock.hold(urgent=urgent):
            await self.commits.room(self.config.steps_in_flight)
            try:
                conn: asyncpg.Connection = await self.pool.acquire()
            except BaseException as error:
                if is_unreachable(error):
                    self.source_down(OutageSource.POSTGRES, error)
                raise
            transaction = FencedTransaction(conn, self.schema, self.epoch)
            try:
                await transaction.start()  # BEGIN + epoch check: one round trip
                step = Step(conn, await self._loaded(conn), utcnow(), self, self.generation)
                yield step
                if step.generation != self.generation:
                    raise StepAborted("the working set was dropped while this step decided")
                for changes, accounts in step.kept:
                    step.state.apply(changes, accounts)
                pending = self.commits.join(*step.touched())
            except BaseException as error:
                await self._abandon(conn, transaction, error)
                raise
            if self.config.steps_in_flight == 1:  # serial: the next step decides once this one has committed
                await self._persist(step, transaction, pending)
                return
        await self._persist(step, transaction, pending)

    async def _loaded(self, conn: asyncpg.Connection) -> WorkingSet:
        """The working set; after a gap, reloaded — once no step is pending (their writes are settled)."""
        if self.state is None:
            await self.commits.drained()
            self.state = await load_everything(conn, self.schema, self.config.renewal_event_every_s)
            self.reloads += 1
            log.info("working set loaded", tasks=len(self.state.tasks), leases=len(self.state.leases),
                     nodes=len(self.state.nodes), reloads=self.reloads)
        return self.state

    async def _persist(self, step: Step, transaction: FencedTransaction, pending: Pending) -> None:
        """The decided step's writes and commit, in step order (module docstring)."""
        try:
            await self.commits.turn(pending)
            for save in step.saves:
                await save(step.conn)
            await transaction.commit()
        except BaseException as error:
            self.commits.settle(pending, committed=False)
            await self._abandon(step.conn, transaction, error)
            raise
        self.commits.settle(pending, committed=True)
        await self.pool.release(step.conn)
        self.source_up(OutageSource.POSTGRES)

    async def _abandon(self, conn: asyncpg.Connection, transaction: FencedTransaction, error: BaseException) -> None:
        """A step failed: roll back what can be, drop the working set, give the connection back."""
        self.drop_state()
        try:
            if conn.is_in_transaction() and not conn.is_closed():
                with contextlib.suppress(Exception):
                    await transaction.rollback()
        finally:
            await self.pool.release(conn)  # the pool resets (or closes) a connection left mid-transaction
        if is_unreachable(error):
            self.source_down(OutageSource.POSTGRES, error)

    def drop_state(self) -> None:
        """The tables may no longer match memory: reload before the next step decides."""
        self.state = None
        self.generation += 1

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
