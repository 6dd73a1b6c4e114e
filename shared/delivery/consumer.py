"""FastStream subscriber conventions: consumer groups, a claimer, delivery counting, dead-letter.

`@reliable_subscriber(broker, stream=..., group=..., parse=parse_event)` registers two FastStream
subscribers in one consumer group (FastStream 0.7.8, Redis >= 6.2):

- a claimer: `StreamSub(min_idle_time=...)`, FastStream's own XAUTOCLAIM loop, which takes over
  entries left pending longer than `min_idle_ms` by any consumer (crashed, or whose handler
  raised);
- a reader: XREADGROUP `>` for new entries.

Whichever starts first creates the group (MKSTREAM) at `start_id`, default `0`, so a new group
sees everything already in the stream; FastStream alone would create it at `$` and skip history.
(FastStream keeps subscribers in a WeakSet, so their start order is arbitrary: the reader's
`start` is wrapped to create the group before FastStream's own attempt.)

Each entry then goes through the same steps (`shared.delivery.entry_steps.DeliveryPipeline`):

1. redelivered (claimer) entries: read the delivery count (XPENDING); past `max_deliveries`
   (the consumer kept dying) -> dead-letter `exhausted`;
2. parse the body with `parse` -> on any error, dead-letter `invalid` at once (never retried);
   so is an event whose type another service owns (`shared.events.ownership.refused_producer`:
   e.g. a `task.succeeded` not produced by the dispatcher);
   with `parse_entry=True` the parser gets the whole `Entry` (id and every field) instead of
   the body (for streams written by plain Redis clients, e.g. `cf:ingest`); what it returns
   then need not be an `Envelope` (an `arrival.Arrived` is checked as the envelope it carries);
3. bind event_id, type, subject, correlation_id into the structlog context;
4. run the handler -> ack. If it raises: on the last allowed delivery dead-letter `failed`,
   else leave the entry pending and re-raise (FastStream logs it; the claimer retries later).

Dead-letter writes and the ack of the original are one MULTI (see `shared.delivery.deadletter`).
Handlers must be idempotent (`record_consumed` in the effect's transaction): an entry may be
delivered again after a crash, or when a handler runs longer than `min_idle_ms`.

`reliable_batch_subscriber` is the same with FastStream's batch reads (`StreamSub(batch=True)`):
the handler gets a list of events. If it raises, the entries are applied again one at a time
(as batches of one) at once, so a poison entry never holds back the rest of its batch: the ones
that succeed are acked, the failing ones stay pending for the claimer (which counts their
deliveries and dead-letters them after `max_deliveries`). When the first few fail in a row too,
the cause is taken to be shared (a backend down) and the whole rest stays pending. With
`linger_ms`, a batch reader that got fewer than `max_records` entries waits that long after
handling them before it reads again, so what arrives meanwhile comes as one batch: for consumers
that nothing waits on right after an event (`OFF_PATH_LINGER_MS`), which at a low rate would
otherwise handle every event as a batch, and a transaction, of its own. Entries that arrive while
it lingers are simply not read yet (nothing is pending on their behalf).

Entries are read undecoded (`shared.delivery.faststream_glue.parse_undecoded`): whatever bytes an
entry holds, it reaches step 2 and, if unreadable, is dead-lettered with the reason instead of failing
inside FastStream forever. The raw message is the handler's argument (`decode_to_raw`), not a
`Context("message")`, which FastStream resolves in a worker thread for every message. A subscriber's
start outlasts a slow or silent Redis (`survive_a_slow_start`, same module).
"""

from __future__ import annotations

import asyncio
import os
import socket
import warnings
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

from faststream.redis import RedisBroker, StreamSub

from shared.delivery.entry_steps import BatchHandler, DeliveryPipeline, E, Handler, Subscription, entries_of
from shared.delivery.faststream_glue import subscriber_options, survive_a_slow_start, until_redis_answers
from shared.delivery.wire import ensure_group

OFF_PATH_LINGER_MS = 250
"""`linger_ms` of the consumers nothing waits on within a second (ledger, alerts, audit archive):
at 10 events/s each event was a batch (and a transaction) of its own in each of them, CPU that the
hops a new task waits on competed with. Not the views: the console's API reads them right after a
caller saw an event (e.g. approving a task it just saw held)."""


def default_consumer_name() -> str:
    """Unique per process: `<host>-<pid>`. Entries a dead process left pending are claimed by others."""
    return f"{socket.gethostname()}-{os.getpid()}"


class SubscriptionOptions(TypedDict, total=False):
    """The optional keywords of both subscribers; omitted ones take `Subscription`'s defaults
    (`consumer`: `default_consumer_name()`)."""

    consumer: str | None
    max_deliveries: int
    min_idle_ms: int
    claim_interval_ms: int
    start_id: str
    body_field: str
    deadletter_stream: str
    max_records: int
    parse_entry: bool
    linger_ms: int
    block_ms: int


def reliable_subscriber(
    broker: RedisBroker, *, stream: str, group: str, parse: Callable[[Any], E], **options: Unpack[SubscriptionOptions]
) -> Callable[[Handler[E]], Handler[E]]:
    """Decorate `async def handler(event) -> None` to consume `stream` in `group` reliably.

    `min_idle_ms` must exceed the handler's longest run, or a slow entry is claimed by another
    consumer while still running (harmless for idempotent handlers, but wasted work).
    `parse` gets the entry's body (bytes), or the whole `Entry` when `parse_entry` is True.
    """
    sub = _subscription(stream, group, options)

    def decorate(handler: Handler[E]) -> Handler[E]:
        pipeline = DeliveryPipeline(broker, sub, parse)
        _register_claimer(broker, pipeline, handler)

        @_reader(broker, sub, batch=False)
        async def read(raw: Any) -> None:
            for entry in entries_of(raw):
                await pipeline.process(entry, handler, redelivered=False)

        return handler

    return decorate


def reliable_batch_subscriber(
    broker: RedisBroker, *, stream: str, group: str, parse: Callable[[Any], E], **options: Unpack[SubscriptionOptions]
) -> Callable[[BatchHandler[E]], BatchHandler[E]]:
    """Like `reliable_subscriber`, but `async def handler(events: list[Event])` gets up to `max_records`."""
    sub = _subscription(stream, group, options)

    def decorate(handler: BatchHandler[E]) -> BatchHandler[E]:
        pipeline = DeliveryPipeline(broker, sub, parse)

        async def handle_one(event: E) -> None:
            await handler([event])

        _register_claimer(broker, pipeline, handle_one)

        @_reader(broker, sub, batch=True)
        async def read(raw: Any) -> None:
            entries = entries_of(raw)
            await pipeline.process_batch(entries, handler)
            if sub.linger_ms > 0 and len(entries) < sub.max_records:
                await asyncio.sleep(sub.linger_ms / 1000)  # let the next batch gather

        return handler

    return decorate


def _subscription(stream: str, group: str, options: SubscriptionOptions) -> Subscription:
    unknown = set(options) - set(SubscriptionOptions.__annotations__)
    if unknown:
        raise TypeError(f"unexpected subscriber options: {sorted(unknown)}")
    if options.get("max_deliveries", 1) < 1:
        raise ValueError("max_deliveries must be >= 1")
    if options.get("linger_ms", 0) < 0:
        raise ValueError("linger_ms must be >= 0")
    settings = {name: value for name, value in options.items() if name != "consumer"}
    consumer = options.get("consumer") or default_consumer_name()
    return Subscription(stream=stream, group=group, consumer=consumer, **settings)  # type: ignore[arg-type]


def _register_claimer(broker: RedisBroker, pipeline: DeliveryPipeline, handler: Handler[Any]) -> None:
    """The XAUTOCLAIM subscriber (its `last_id` only sets where the group starts if it creates it)."""
    sub = pipeline.sub
    with warnings.catch_warnings():
        # FastStream warns that polling_interval is unused for a group read from an explicit id;
        # here last_id only sets where a new group starts, and polling_interval paces XAUTOCLAIM.
        warnings.simplefilter("ignore", RuntimeWarning)
        claim_stream = StreamSub(
            sub.stream,
            group=sub.group,
            consumer=sub.consumer,
            last_id=sub.start_id,
            min_idle_time=sub.min_idle_ms,
            polling_interval=sub.claim_interval_ms,
        )

    claimer = broker.subscriber(stream=claim_stream, **subscriber_options(_title(sub, "claimer")))
    survive_a_slow_start(claimer, _title(sub, "claimer"))

    @claimer
    async def claim(raw: Any) -> None:
        for entry in entries_of(raw):
            await pipeline.process(entry, handler, redelivered=True)


def _reader(broker: RedisBroker, sub: Subscription, *, batch: bool) -> Any:
    """The XREADGROUP `>` subscriber; its start first ensures the group exists at `start_id`."""
    stream = StreamSub(
        sub.stream, group=sub.group, consumer=sub.consumer, batch=batch, max_records=sub.max_records,
        polling_interval=sub.block_ms,
    )  # fmt: skip
    role = "batch-reader" if batch else "reader"
    reader = broker.subscriber(stream=stream, **subscriber_options(_title(sub, role)))
    survive_a_slow_start(reader, _title(sub, role))
    faststream_start = reader.start

    async def start_after_group() -> None:
        async def create_group() -> None:
            await ensure_group(await broker.connect(), sub.stream, sub.group, sub.start_id)

        await until_redis_answers(create_group, "create the consumer group", _title(sub, role))
        await faststream_start()

    reader.start = start_after_group
    return reader


def _title(sub: Subscription, role: str) -> str:
    return f"{sub.stream}:{sub.group}:{role}"
