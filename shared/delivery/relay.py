"""The outbox relay: publishes a schema's committed outbox rows to Redis Streams, in order.

One `publish_pending` call is one PostgreSQL transaction:

1. take the schema's relay lock (`pg_try_advisory_xact_lock`); if another relay holds it,
   publish nothing — relays of one schema never publish concurrently, so no row goes out twice
   at the same time and rows leave in `position` order (a SKIP LOCKED split would interleave
   batches and reorder a subject's events);
2. read up to `limit` unpublished rows in `position` order (a statement of its own, after the lock:
   its snapshot then sees every row another relay marked before releasing the lock);
3. XADD them all in one pipeline (one round trip). Rows bound for `cf:events` go to the schema's
   own stream `cf:events:<schema>` (`shared.names.producer_stream`): only this service's Redis
   user may write there, and the gate forwards what it owns to `cf:events` (`services.gate`);
4. mark them published (with their entry ids) and commit.

A crash between 3 and 4 leaves the rows unmarked: they are published again on restart
(at-least-once; consumers dedupe by event_id). `run` repeats this, woken by the NOTIFY that
`append_events` sends at commit, and at least every `poll_interval` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import asyncpg
from redis.asyncio import Redis

from shared.delivery.db import quote_schema
from shared.delivery.migrations import advisory_key
from shared.delivery.outbox import notify_channel
from shared.delivery.wire import entry_fields
from shared.logging import get_logger
from shared.names import EVENTS_STREAM, producer_stream

log = get_logger(__name__)


class OutboxRelay:
    """Publishes `schema`.outbox to Redis. Several instances per schema are safe (one publishes)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        redis: Redis,
        schema: str,
        *,
        batch_size: int = 500,
        poll_interval: float = 1.0,
        error_backoff: float = 1.0,
    ) -> None:
        quoted = quote_schema(schema)
        self.schema = schema
        self._pool = pool
        self._redis = redis
        self._batch_size = batch_size
        self._poll_interval = poll_interval
        self._error_backoff = error_backoff
        self._lock_key = advisory_key("relay", schema)
        self._events_stream = producer_stream(schema)
        self._select_sql = (
            f"SELECT position, event_id, type, subject, stream, body FROM {quoted}.outbox"
            " WHERE published_at IS NULL ORDER BY position LIMIT $1"
        )
        self._mark_sql = (
            f"UPDATE {quoted}.outbox AS o SET published_at = now(), entry_id = m.entry_id"
            " FROM unnest($1::bigint[], $2::text[]) AS m(position, entry_id) WHERE o.position = m.position"
        )

    async def publish_pending(self, limit: int | None = None) -> int:
        """Publish up to `limit` (default: batch size) pending rows; return how many were published."""
        async with self._pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", self._lock_key):
                return 0
            rows = await conn.fetch(self._select_sql, limit or self._batch_size)
            if not rows:
                return 0
            entry_ids = await self._xadd_batch(rows)
            await self._mark_sent(conn, rows, entry_ids)
        return len(rows)

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until `stop` is set: drain, then sleep until NOTIFY, poll interval or stop."""
        async with self._listening() as wake:
            while not stop.is_set():
                published = await self._publish_or_back_off(stop)
                if published >= self._batch_size:
                    continue  # more are probably waiting
                await _wait_any(wake, stop, self._poll_interval)
                wake.clear()
        log.info("outbox relay stopped", schema=self.schema)

    async def _publish_or_back_off(self, stop: asyncio.Event) -> int:
        try:
            return await self.publish_pending()
        except Exception:  # infrastructure loop: log, back off, keep relaying
            log.exception("outbox relay failed; retrying", schema=self.schema)
            await _wait_any(asyncio.Event(), stop, self._error_backoff)
            return 0

    async def _xadd_batch(self, rows: Sequence[asyncpg.Record]) -> list[str]:
        """XADD every row in one pipeline (no MULTI: order is kept, one round trip)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for row in rows:
                stream = self._events_stream if row["stream"] == EVENTS_STREAM else row["stream"]
                pipe.xadd(stream, entry_fields(row["event_id"], row["type"], row["subject"], row["body"]))
            results = await pipe.execute()
        return [r.decode() if isinstance(r, bytes) else str(r) for r in results]

    async def _mark_sent(self, conn: asyncpg.Connection, rows: Sequence[asyncpg.Record], entry_ids: list[str]) -> None:
        await conn.execute(self._mark_sql, [row["position"] for row in rows], entry_ids)

    @contextlib.asynccontextmanager
    async def _listening(self) -> AsyncIterator[asyncio.Event]:
        """Hold one connection LISTENing on the schema's channel; yield the event it sets."""
        wake = asyncio.Event()
        wake.set()  # publish whatever is pending at start

        def on_notify(*_: object) -> None:
            wake.set()

        channel = notify_channel(self.schema)
        async with self._pool.acquire() as conn:
            await conn.add_listener(channel, on_notify)
            try:
                yield wake
            finally:
                with contextlib.suppress(Exception):
                    await conn.remove_listener(channel, on_notify)


async def _wait_any(wake: asyncio.Event, stop: asyncio.Event, timeout: float) -> None:
    """Return when `wake` or `stop` is set, or after `timeout` seconds."""
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
