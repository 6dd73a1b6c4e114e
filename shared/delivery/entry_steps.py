"""The steps each delivered stream entry goes through, for one subscription (`DeliveryPipeline`).

1. redelivered (claimer) entries: read the delivery count (XPENDING); past `max_deliveries`
   (the consumer kept dying) -> dead-letter `exhausted`;
2. parse the body -> on any error, or an event whose type another service owns
   (`shared.events.ownership.refused_producer`), dead-letter `invalid` at once (never retried);
3. bind event_id, type, subject, correlation_id into the structlog context;
4. run the handler -> ack. If it raises: on the last allowed delivery dead-letter `failed`,
   else leave the entry pending and re-raise (the claimer retries later).

A batch whose handler raises is applied again one entry at a time (`process_one_by_one`). How the
subscribers that feed these steps are registered with FastStream (a reader and a claimer per consumer
group) is `shared.delivery.consumer`; its docstring states the conventions in full.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from faststream.redis import RedisBroker
from redis.asyncio import Redis

from shared.delivery.arrival import Arrived
from shared.delivery.deadletter import DeadLetterSource, DeadReason, deadletter_and_ack, deadletter_fields
from shared.delivery.wire import BODY_FIELD, extract_body
from shared.events.envelope import Envelope
from shared.events.ownership import refused_producer
from shared.logging import bind_message_context, get_logger
from shared.names import DEADLETTER_STREAM

E = TypeVar("E", bound=Envelope)
Handler = Callable[[E], Awaitable[None]]
BatchHandler = Callable[[list[E]], Awaitable[None]]

log = get_logger(__name__)

OUTAGE_AFTER_FAILURES = 3
"""Entries of a failed batch that may fail in a row, one by one, before the rest is left pending."""

class ForeignProducerError(ValueError):
    """An event whose type another service owns (`shared.events.ownership`): never trusted."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """Where and how a handler consumes."""

    stream: str
    group: str
    consumer: str
    max_deliveries: int = 5
    min_idle_ms: int = 30_000
    claim_interval_ms: int = 1_000
    start_id: str = "0"
    body_field: str = BODY_FIELD
    deadletter_stream: str = DEADLETTER_STREAM
    max_records: int = 100
    parse_entry: bool = False
    linger_ms: int = 0
    """Batch readers only: after a batch shorter than `max_records`, wait this long before reading
    again (see the module docstring)."""
    block_ms: int = 2_000
    """How long one XREADGROUP waits for new entries. An entry that arrives is returned at once
    whatever this is; it only sets how often an idle reader asks again (FastStream's default,
    100 ms, made every idle reader, e.g. each agent's inbox, ten round trips a second)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry as read: its id and its raw fields."""

    entry_id: str
    fields: dict[bytes, bytes]


class DeliveryPipeline:
    """The per-entry steps (count, parse, bind context, handle, ack / dead-letter) of one subscription."""

    def __init__(self, broker: RedisBroker, subscription: Subscription, parse: Callable[[Any], Envelope]) -> None:
        self.sub = subscription
        self._broker = broker
        self._parse = parse

    async def redis(self) -> Redis:
        return await self._broker.connect()  # the broker's own client, connected at broker start

    async def process(self, entry: Entry, handler: Handler[Any], *, redelivered: bool) -> None:
        """Run one entry through the steps in the module docstring."""
        deliveries = await self.delivery_count(entry) if redelivered else 1
        if deliveries == 0:
            return  # acked meanwhile by another consumer
        if deliveries > self.sub.max_deliveries:
            await self.dead(entry, DeadReason.EXHAUSTED, deliveries, None)
            return
        event = await self.parse_or_dead(entry, deliveries)
        if event is None:
            return
        bind_event_context(event, self.sub, entry, deliveries)
        try:
            await handler(event)
        except Exception as exc:
            if deliveries < self.sub.max_deliveries:
                log.warning("handler failed; entry left pending for the claimer", error=repr(exc))
                raise
            await self.dead(entry, DeadReason.FAILED, deliveries, exc)
            return
        await self.ack([entry])

    async def process_batch(self, entries: list[Entry], handler: BatchHandler[Any]) -> None:
        """First delivery of a batch: dead-letter invalid entries, hand the rest over at once."""
        accepted: list[tuple[Entry, Envelope]] = []
        for entry in entries:
            event = await self.parse_or_dead(entry, 1)
            if event is not None:
                accepted.append((entry, event))
        if not accepted:
            return
        bind_message_context(stream=self.sub.stream, group=self.sub.group, batch_size=len(accepted))
        try:
            await handler([event for _, event in accepted])
        except Exception as exc:
            if len(accepted) == 1:
                await self.failed_first_delivery(accepted[0][0], exc)
                return
            log.warning("batch handler failed; applying its entries one at a time", error=repr(exc))
            await self.process_one_by_one(accepted, handler)
            return
        await self.ack([entry for entry, _ in accepted])

    async def process_one_by_one(self, accepted: list[tuple[Entry, Envelope]], handler: BatchHandler[Any]) -> None:
        """A failed batch, entry by entry (batches of one): one poison entry never holds back the
        rest. After `OUTAGE_AFTER_FAILURES` failures in a row with no success the cause is taken to
        be shared (a backend down), and the rest is left pending for the claimer as it is."""
        failures_in_a_row, first_error = 0, None
        for index, (entry, event) in enumerate(accepted):
            if failures_in_a_row >= OUTAGE_AFTER_FAILURES:
                log.warning("entries keep failing; the rest of the batch is left for the claimer", left=len(accepted) - index)
                break
            try:
                await handler([event])
            except Exception as exc:
                failures_in_a_row, first_error = failures_in_a_row + 1, first_error or exc
                await self.failed_first_delivery(entry, exc, reraise=False)
                continue
            failures_in_a_row = 0
            await self.ack([entry])
        if first_error is not None and self.sub.max_deliveries > 1:
            raise first_error  # FastStream logs it; the failed entries stay pending for the claimer

    async def failed_first_delivery(self, entry: Entry, exc: Exception, *, reraise: bool = True) -> None:
        """The handler failed on an entry's first delivery: leave it pending, or dead-letter it when
        one delivery is all it may have."""
        if self.sub.max_deliveries > 1:
            log.warning("handler failed; entry left pending for the claimer", entry_id=entry.entry_id, error=repr(exc))
            if reraise:
                raise exc
            return
        await self.dead(entry, DeadReason.FAILED, 1, exc)

    async def parse_or_dead(self, entry: Entry, deliveries: int) -> Envelope | None:
        """The parsed event, or None after dead-lettering an entry that can never be processed
        (unreadable, or an event from a producer that does not own its type)."""
        try:
            if self.sub.parse_entry:
                event = self._parse(entry)
            else:
                event = self._parse(extract_body(entry.fields, self.sub.body_field))
            envelope = event.envelope if isinstance(event, Arrived) else event
            refused = refused_producer(envelope) if isinstance(envelope, Envelope) else None
            if refused is not None:
                raise ForeignProducerError(refused)
            return event
        except Exception as exc:
            await self.dead(entry, DeadReason.INVALID, deliveries, exc)
            return None

    async def delivery_count(self, entry: Entry) -> int:
        """XPENDING's delivery count of the entry (0 = no longer pending)."""
        redis = await self.redis()
        pending = await redis.xpending_range(
            self.sub.stream, self.sub.group, min=entry.entry_id, max=entry.entry_id, count=1
        )
        return int(pending[0]["times_delivered"]) if pending else 0

    async def ack(self, entries: list[Entry]) -> None:
        redis = await self.redis()
        await redis.xack(self.sub.stream, self.sub.group, *[e.entry_id for e in entries])

    async def dead(self, entry: Entry, reason: DeadReason, deliveries: int, error: BaseException | None) -> None:
        """Move the entry to the dead-letter stream and ack it (one MULTI)."""
        source = DeadLetterSource(self.sub.stream, self.sub.group, self.sub.consumer, entry.entry_id)
        fields = deadletter_fields(source, entry.fields, reason, deliveries, error)
        await deadletter_and_ack(await self.redis(), source, fields, self.sub.deadletter_stream)
        bind_message_context(stream=self.sub.stream, group=self.sub.group, entry_id=entry.entry_id)
        log.error(
            "entry dead-lettered",
            reason=reason.value,
            deliveries=deliveries,
            error=repr(error) if error else None,
            deadletter_stream=self.sub.deadletter_stream,
        )


def bind_event_context(event: Envelope, sub: Subscription, entry: Entry, deliveries: int) -> None:
    if isinstance(event, Arrived):
        event = event.envelope
    bind_message_context(
        event_id=getattr(event, "event_id", None),
        type=getattr(event, "type", None),
        subject=getattr(event, "subject", None),
        correlation_id=getattr(event, "correlation_id", None),
        stream=sub.stream,
        group=sub.group,
        entry_id=entry.entry_id,
        deliveries=deliveries,
    )


def entries_of(raw: Mapping[str, Any]) -> list[Entry]:
    """The (entry id, fields) pairs of a raw FastStream stream message (`raw_message`), single or batch."""
    data = raw["data"]
    rows = [data] if isinstance(data, dict) else list(data)
    return [Entry(i.decode(), dict(d or {})) for i, d in zip(raw["message_ids"], rows, strict=True)]
