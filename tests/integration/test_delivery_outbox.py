"""Outbox, subject sequence, relay and inbox against real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from redis.asyncio import Redis

from shared.delivery import (
    OutboxRelay,
    append_events,
    migrate_delivery,
    next_subject_seq,
    next_subject_seqs,
    record_consumed,
    record_consumed_many,
)
from shared.delivery.db import create_pool
from shared.delivery.migrations import advisory_key
from shared.delivery.outbox import NotInTransactionError
from shared.embedded import Endpoints
from shared.events.envelope import canonical_json
from tests.helpers.delivery_support import a_test_event, pool, redis, schema, unique, wait_until  # noqa: F401


@pytest.fixture
async def delivery_schema(pool: asyncpg.Pool, schema: str) -> str:
    await migrate_delivery(pool, schema)
    return schema


async def stream_events(redis: Redis, stream: str) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in await redis.xrange(stream)]


async def test_events_commit_or_roll_back_with_the_callers_transaction(
    pool: asyncpg.Pool, delivery_schema: str
) -> None:
    kept, dropped = a_test_event(1), a_test_event(2)
    async with pool.acquire() as conn:
        async with conn.transaction():
            await append_events(conn, delivery_schema, [kept])
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await append_events(conn, delivery_schema, [dropped])
                raise RuntimeError("handler failed after appending")
        with pytest.raises(NotInTransactionError):
            await append_events(conn, delivery_schema, [dropped])

    rows = await pool.fetch(f"SELECT event_id, body FROM {delivery_schema}.outbox")
    assert [(r["event_id"], r["body"]) for r in rows] == [(kept.event_id, canonical_json(kept).decode())]


async def test_subject_seq_is_gap_free_under_concurrency_and_rollbacks(pool: asyncpg.Pool, delivery_schema: str) -> None:
    async def take(rollback: bool) -> int | None:
        async with pool.acquire() as conn:
            try:
                async with conn.transaction():
                    seq = await next_subject_seq(conn, delivery_schema, "task/T1")
                    if rollback:
                        raise LookupError
                    return seq
            except LookupError:
                return None

    taken = await asyncio.gather(*(take(rollback=i % 3 == 0) for i in range(15)))

    committed = sorted(s for s in taken if s is not None)
    assert committed == list(range(1, 11))
    async with pool.acquire() as conn, conn.transaction():
        assert await next_subject_seq(conn, delivery_schema, "task/T1") == 11
        assert await next_subject_seq(conn, delivery_schema, "task/T2") == 1


async def test_batch_subject_seqs_continue_each_subjects_sequence(pool: asyncpg.Pool, delivery_schema: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await next_subject_seq(conn, delivery_schema, "task/A")
        seqs = await next_subject_seqs(conn, delivery_schema, ["task/B", "task/A", "task/B", "task/A", "task/C"])
        after = await next_subject_seq(conn, delivery_schema, "task/B")
    assert seqs == [1, 2, 2, 3, 1]
    assert after == 3


async def test_relay_publishes_in_order_with_the_wire_format_and_marks_rows(
    pool: asyncpg.Pool, redis: Redis, delivery_schema: str
) -> None:
    stream = unique("cf:test:events")
    events = [a_test_event(n, subject=f"test/{n % 3}") for n in range(7)]
    async with pool.acquire() as conn, conn.transaction():
        await append_events(conn, delivery_schema, events, stream=stream)
    relay = OutboxRelay(pool, redis, delivery_schema, batch_size=3)

    published = [await relay.publish_pending() for _ in range(4)]

    assert published == [3, 3, 1, 0]
    entries = await stream_events(redis, stream)
    assert [e[b"event_id"].decode() for e in entries] == [e.event_id for e in events]
    assert entries[0] == {
        b"event_id": events[0].event_id.encode(), b"type": b"test.happened",
        b"subject": b"test/0", b"event": canonical_json(events[0]),
    }  # fmt: skip
    unmarked = await pool.fetchval(f"SELECT count(*) FROM {delivery_schema}.outbox WHERE published_at IS NULL")
    stored_ids = await pool.fetch(f"SELECT entry_id FROM {delivery_schema}.outbox ORDER BY position")
    assert unmarked == 0
    assert [r["entry_id"] for r in stored_ids] == [i.decode() for i, _ in await redis.xrange(stream)]


async def test_concurrent_relays_of_one_schema_publish_each_row_once(
    pool: asyncpg.Pool, redis: Redis, delivery_schema: str
) -> None:
    stream = unique("cf:test:events")
    events = [a_test_event(n) for n in range(600)]
    async with pool.acquire() as conn, conn.transaction():
        await append_events(conn, delivery_schema, events, stream=stream)
    relays = [OutboxRelay(pool, redis, delivery_schema, batch_size=50) for _ in range(4)]

    async def drain(relay: OutboxRelay) -> None:
        for _ in range(200):
            await relay.publish_pending()
            await asyncio.sleep(0)

    await asyncio.gather(*(drain(r) for r in relays))

    published_ids = [e[b"event_id"].decode() for e in await stream_events(redis, stream)]
    assert published_ids == [e.event_id for e in events]


async def test_relay_run_is_woken_by_notify_not_only_by_polling(
    pool: asyncpg.Pool, redis: Redis, delivery_schema: str
) -> None:
    stream = unique("cf:test:events")
    relay = OutboxRelay(pool, redis, delivery_schema, poll_interval=3600)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        await asyncio.sleep(0.3)  # the relay drained the (empty) outbox and sleeps on LISTEN
        async with pool.acquire() as conn, conn.transaction():
            await append_events(conn, delivery_schema, [a_test_event(1)], stream=stream)

        async def published() -> bool:
            return await redis.xlen(stream) == 1

        assert await wait_until(published, timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


async def test_relay_keeps_going_after_a_failed_publish(pool: asyncpg.Pool, redis: Redis, delivery_schema: str) -> None:
    stream = unique("cf:test:events")
    await redis.set(stream, "not a stream")  # XADD to it fails with WRONGTYPE
    async with pool.acquire() as conn, conn.transaction():
        await append_events(conn, delivery_schema, [a_test_event(1)], stream=stream)
    relay = OutboxRelay(pool, redis, delivery_schema, poll_interval=0.05, error_backoff=0.05)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        await asyncio.sleep(0.3)
        pending = await pool.fetchval(f"SELECT count(*) FROM {delivery_schema}.outbox WHERE published_at IS NULL")
        assert pending == 1 and not running.done()
        await redis.delete(stream)

        async def published() -> bool:
            return await redis.exists(stream) == 1 and await redis.xlen(stream) == 1

        assert await wait_until(published, timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


async def test_inbox_records_each_event_once_per_consumer(pool: asyncpg.Pool, delivery_schema: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        first = await record_consumed(conn, delivery_schema, "ledger", "01J000000000000000000000AA")
        again = await record_consumed(conn, delivery_schema, "ledger", "01J000000000000000000000AA")
        other_consumer = await record_consumed(conn, delivery_schema, "audit", "01J000000000000000000000AA")
        batch = await record_consumed_many(
            conn, delivery_schema, "ledger", ["01J000000000000000000000AA", "01J000000000000000000000BB"]
        )
    assert (first, again, other_consumer) == (True, False, True)
    assert batch == {"01J000000000000000000000BB"}


async def test_pool_reads_and_writes_jsonb_as_python_values(pool: asyncpg.Pool) -> None:
    value = {"gpus": [0, 1], "card": "H100", "nested": {"ok": True}}
    assert await pool.fetchval("SELECT $1::jsonb", value) == value
    assert json.loads(await pool.fetchval("SELECT ($1::jsonb)::text", value)) == value


async def test_a_released_connection_keeps_its_session_but_never_an_open_transaction(backends: Endpoints) -> None:
    """The pool skips asyncpg's reset query (one round trip per acquire; shared/delivery/db.py):
    session state is the taker's to undo, while a transaction left open is still rolled back."""
    one = await create_pool(backends.database_url, min_size=1, max_size=1)
    try:
        async with one.acquire() as conn:
            await conn.execute("SET application_name = 'left-by-a-taker'")
            transaction = conn.transaction()
            await transaction.start()
            await conn.execute("SET LOCAL statement_timeout = 1234")
        async with one.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT current_setting('statement_timeout')") != "1234ms"
            assert await conn.fetchval("SELECT current_setting('application_name')") == "left-by-a-taker"
    finally:
        await one.close()


async def test_a_relay_publishes_nothing_while_another_holds_the_schemas_relay_lock(
    pool: asyncpg.Pool, redis: Redis, delivery_schema: str
) -> None:
    stream = unique("cf:test:events")
    async with pool.acquire() as conn, conn.transaction():
        await append_events(conn, delivery_schema, [a_test_event(1), a_test_event(2)], stream=stream)
    relay = OutboxRelay(pool, redis, delivery_schema)
    async with pool.acquire() as holder, holder.transaction():
        assert await holder.fetchval("SELECT pg_try_advisory_xact_lock($1)", advisory_key("relay", delivery_schema))
        assert await relay.publish_pending() == 0
        assert await redis.xlen(stream) == 0
    assert await relay.publish_pending() == 2
