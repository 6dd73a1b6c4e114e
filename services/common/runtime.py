"""The runtime every service shares: connections, migrations, outbox relay, broker and loops.

A service is declared as a `ServiceSpec` (name, PostgreSQL schema, migrations, a `setup` that
registers its subscribers and periodic loops on a `ServiceContext`). `run_service` then does the
same recipe for all of them:

1. open the asyncpg pool and a Redis client; apply the delivery tables and the service's own
   migrations to its schema (safe when several instances start at once);
2. build the FastStream broker and let the service register its subscribers and loops;
3. start the outbox relay, the broker and the loops; run until `stop` is set;
4. stop everything in reverse order and close the connections.

Handlers stay thin: parse (done by the subscriber) -> `async with ctx.transaction() as conn` ->
`if not await ctx.consume_once(conn, event): return` -> load, decide (pure), write + `ctx.emitter.emit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from faststream.redis import RedisBroker
from redis.asyncio import Redis

from services.common.task_ending import end_tasks
from services.observability.delivery import instrument_service
from shared.delivery.entry_steps import Entry
from shared.delivery.consumer import default_consumer_name
from shared.delivery.db import close_pool, create_pool
from shared.delivery.inbox import record_consumed
from shared.delivery.migrations import migrate, migrate_delivery
from shared.delivery.outbox import UnnumberedEvent, append_routed, next_subject_seqs
from shared.delivery.relay import OutboxRelay
from shared.delivery.redis_packing import redis_client
from shared.delivery.retention import DEFAULT_RETENTION, sweep
from shared.delivery.wire import extract_body
from shared.event_wait import wait_until_set
from shared.events import Envelope, make_event, parse_event
from shared.events.emission import Emission
from shared.logging import get_logger
from shared.redis_acl import trimmed_streams
from shared.settings import Settings

log = get_logger(__name__)

Loop = Callable[["ServiceContext"], Awaitable[None]]


@dataclass(frozen=True)
class ServiceSpec:
    """What makes a service: its name, its schema and migrations, and how it wires itself up."""

    name: str
    schema: str | None
    migrations: Path | None
    setup: Callable[["ServiceContext"], Awaitable[None]]
    relay_poll_interval: float = 0.5


@dataclass
class ServiceContext:
    """Handles a service's code gets: pool, Redis, broker, identity, and helpers to emit events."""

    spec: ServiceSpec
    settings: Settings
    pool: asyncpg.Pool
    redis: Redis
    broker: RedisBroker
    stop: asyncio.Event
    instance: str = field(default_factory=default_consumer_name)
    loops: list[tuple[str, float, Loop]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    resources: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    """Clients a service opens in `setup` (`await ctx.resources.enter_async_context(...)`); closed after stop."""

    @property
    def schema(self) -> str:
        if self.spec.schema is None:
            raise RuntimeError(f"service {self.spec.name} has no PostgreSQL schema")
        return self.spec.schema

    @property
    def producer(self) -> str:
        return f"{self.spec.name}/{self.instance}"

    @property
    def actor(self) -> str:
        return f"service:{self.spec.name}"

    def every(self, seconds: float, loop: Loop, *, name: str | None = None) -> None:
        """Run `loop(ctx)` every `seconds` while the service runs (errors are logged, then retried)."""
        self.loops.append((name or loop.__name__, seconds, loop))

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside one transaction: the handler's effects and events commit together."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def consume_once(self, conn: asyncpg.Connection, event: Envelope, consumer: str | None = None) -> bool:
        """Record `event` as consumed in this transaction; False means it was applied before (skip)."""
        return await record_consumed(conn, self.schema, consumer or self.spec.name, event.event_id)

    @property
    def emitter(self) -> Emitter:
        """This service's `Emitter` (its schema's outbox, its producer and actor)."""
        return Emitter(self.schema, self.producer, self.actor)


@dataclass(frozen=True)
class Emitter:
    """Appends events to one schema's outbox: the one way cardflow code emits.

    Also used by processes that run a service's commands outside the service (the HTTP API runs
    intake's commands with an intake `Emitter`).
    """

    schema: str
    producer: str
    actor: str

    async def emit(self, conn: asyncpg.Connection, emissions: Sequence[Emission]) -> list[Envelope]:
        """Number `emissions` per subject and append them to the outbox, in the caller's transaction.

        Two statements whatever the count (sequence numbers, then the outbox rows with a NOTIFY);
        rows are published in the order given, each to its emission's stream.
        """
        if not emissions:
            return []
        seqs = await next_subject_seqs(conn, self.schema, [item.subject for item in emissions])
        events = [self._build(item, seq) for item, seq in zip(emissions, seqs, strict=True)]
        await append_routed(conn, self.schema, [(event, item.stream) for event, item in zip(events, emissions)])
        return events

    def build(self, emissions: Sequence[Emission]) -> list[UnnumberedEvent]:
        """The events of `emissions` and their JSON, before they are numbered (no I/O: a caller may build
        them while PostgreSQL runs its other statements, then `append_numbered` them). `emit` numbers
        first and builds after, as its callers want the numbered envelopes back."""
        return [UnnumberedEvent.of(self._build(item, 1), item.stream) for item in emissions]

    def _build(self, item: Emission, subject_seq: int) -> Envelope:
        return make_event(
            item.event_type, subject=item.subject, subject_seq=subject_seq, producer=self.producer,
            actor=item.actor_or(self.actor), data=item.data, occurred_at=item.occurred_at, **item.links(),
        )


@dataclass(frozen=True, slots=True)
class SkippedEntry:
    """An entry of a type the subscriber does not handle: handed to the handler unparsed, then acked."""

    entry_id: str
    type: str


def parse_events_of(*event_types: type[Envelope]) -> Callable[[Entry], Envelope | SkippedEntry]:
    """A parser for `reliable_*subscriber(..., parse_entry=True)` that parses only `event_types`.

    `cf:events` carries every event of every service; reading the wire's `type` field first spares a
    handler the pydantic parse of the many entries it ignores. Entries without a `type` field (e.g.
    published by FastStream itself) are parsed in full. Handlers drop `SkippedEntry` values.
    """
    wanted = frozenset(cls.model_fields["type"].default.encode() for cls in event_types)

    def parse(entry: Entry) -> Envelope | SkippedEntry:
        event_type = entry.fields.get(b"type")
        if event_type is not None and event_type not in wanted:
            return SkippedEntry(entry.entry_id, event_type.decode())
        return parse_event(extract_body(entry.fields))

    return parse


async def prepare_schema(pool: asyncpg.Pool, spec: ServiceSpec) -> None:
    """Create or upgrade the service's delivery tables and its own tables."""
    if spec.schema is None:
        return
    await migrate_delivery(pool, spec.schema)
    if spec.migrations is not None:
        await migrate(pool, spec.schema, spec.migrations)


async def run_service(spec: ServiceSpec, settings: Settings, stop: asyncio.Event) -> None:
    """Run one service until `stop` is set (the numbered recipe in the module docstring)."""
    if not settings.redis_url or not settings.database_dsn:
        raise RuntimeError("CARDFLOW_REDIS_URL and CARDFLOW_DATABASE_URL must be set (see `cardflow endpoints`)")
    pool = await create_pool(settings.database_dsn)
    redis = redis_client(settings.redis_url)  # commands packed by hiredis (`shared.delivery.redis_packing`)
    broker = RedisBroker(settings.redis_url, logger=None)
    try:
        await prepare_schema(pool, spec)
        ctx = ServiceContext(spec, settings, pool, redis, broker, stop, instance=f"{settings.instance}-{os.getpid()}")
        async with ctx.resources:
            await instrument_service(ctx)  # metrics and tracing, when the settings turn them on
            await spec.setup(ctx)
            await _run_until_stopped(ctx)
    finally:
        await redis.aclose()
        await close_pool(pool)


async def _run_until_stopped(ctx: ServiceContext) -> None:
    """Start the relay, the broker and the loops, wait for `stop`; wherever a cancel lands (a killed
    service, a test's teardown) every task started here is cancelled too: a relay left running on a
    closed pool would retry forever."""
    tasks: list[asyncio.Task[None]] = []
    try:
        if ctx.spec.schema is not None:
            relay = OutboxRelay(ctx.pool, ctx.redis, ctx.spec.schema, poll_interval=ctx.spec.relay_poll_interval)
            tasks.append(asyncio.create_task(relay.run(ctx.stop), name=f"{ctx.spec.name}:relay"))
        await ctx.broker.start()
        ctx.every(DEFAULT_RETENTION.sweep_every.total_seconds(), retention_sweep, name="retention")
        tasks += [asyncio.create_task(_repeat(ctx, *loop), name=f"{ctx.spec.name}:{loop[0]}") for loop in ctx.loops]
        log.info("service started", service=ctx.spec.name, instance=ctx.instance)
        await ctx.stop.wait()
    finally:
        try:
            await ctx.broker.stop()
        finally:
            await end_tasks(tasks)
            log.info("service stopped", service=ctx.spec.name)


async def retention_sweep(ctx: ServiceContext) -> None:
    """Every service, hourly: trim what every group has read of the streams it reads, prune its outbox
    and inbox (`shared.delivery.retention`; concurrent sweeps of several services are harmless)."""
    await sweep(ctx.pool, ctx.redis, ctx.spec.schema, streams=trimmed_streams(ctx.spec.name))


async def _repeat(ctx: ServiceContext, name: str, seconds: float, loop: Loop) -> None:
    """Call `loop(ctx)` every `seconds`; a failure is logged with its traceback and retried next time."""
    while not ctx.stop.is_set():
        try:
            await loop(ctx)
        except Exception:
            log.exception("periodic loop failed; retrying", loop=name, service=ctx.spec.name)
        await wait_until_set(ctx.stop, seconds)
