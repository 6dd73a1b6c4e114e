"""Crash tests with real processes killed by SIGKILL at the worst moment.

- a consumer dies after committing its effect and before acking: the entry stays pending, the
  restarted consumer's claimer takes it over, the inbox turns the redelivery into a no-op;
- a relay dies after XADD and before marking rows sent: the restarted relay publishes them
  again, and consumers apply each event once.
"""

from __future__ import annotations

import signal

import asyncpg
from redis.asyncio import Redis

from shared.delivery import append_events, wire_fields
from shared.embedded import Endpoints
from tests.helpers.delivery_support import (  # noqa: F401  (pool, redis, schema are fixtures)
    a_test_event,
    count,
    pool,
    prepare_worker_schema,
    redis,
    schema,
    spawn_worker,
    stop_worker,
    unique,
    wait_for_exit,
    wait_until,
)


async def test_consumer_killed_after_commit_before_ack_applies_the_effect_exactly_once(
    backends: Endpoints, pool: asyncpg.Pool, redis: Redis, schema: str
) -> None:
    stream, group = unique("cf:test:crash"), "crash-consumer"
    env = {"CF_TEST_STREAM": stream, "CF_TEST_GROUP": group, "CF_TEST_SCHEMA": schema, "CF_TEST_MIN_IDLE_MS": "300"}
    event = a_test_event(1)
    await redis.xadd(stream, wire_fields(event))

    crashing = spawn_worker("consumer_worker", backends, **env, CF_TEST_CRASH_AFTER_COMMIT="1")
    exit_code = await wait_for_exit(crashing)
    output = stop_worker(crashing)

    assert exit_code == -signal.SIGKILL, output
    assert await count(pool, f"SELECT count(*) FROM {schema}.effects") == 1
    assert (await redis.xpending(stream, group))["pending"] == 1  # committed, never acked

    restarted = spawn_worker("consumer_worker", backends, **env)
    try:

        async def redelivered_and_acked() -> bool:
            duplicates = await count(pool, f"SELECT count(*) FROM {schema}.duplicates")
            return duplicates == 1 and (await redis.xpending(stream, group))["pending"] == 0

        settled = await wait_until(redelivered_and_acked)
    finally:
        output = stop_worker(restarted)

    assert settled, output
    assert await count(pool, f"SELECT count(*) FROM {schema}.effects WHERE event_id = $1", event.event_id) == 1
    assert await count(pool, f"SELECT count(*) FROM {schema}.inbox WHERE event_id = $1", event.event_id) == 1


async def test_relay_killed_after_xadd_before_marking_republishes_and_consumers_apply_once(
    backends: Endpoints, pool: asyncpg.Pool, redis: Redis, schema: str
) -> None:
    stream, group = unique("cf:test:relay"), "relay-consumer"
    await prepare_worker_schema(pool, schema)
    events = [a_test_event(n) for n in range(20)]
    async with pool.acquire() as conn, conn.transaction():
        await append_events(conn, schema, events, stream=stream)

    crashing = spawn_worker("relay_worker", backends, CF_TEST_SCHEMA=schema, CF_TEST_CRASH_AFTER_XADD="1")
    exit_code = await wait_for_exit(crashing)
    output = stop_worker(crashing)

    assert exit_code == -signal.SIGKILL, output
    assert await redis.xlen(stream) == 20
    assert await count(pool, f"SELECT count(*) FROM {schema}.outbox WHERE published_at IS NULL") == 20

    restarted = spawn_worker("relay_worker", backends, CF_TEST_SCHEMA=schema)
    assert await wait_for_exit(restarted) == 0, stop_worker(restarted)
    stop_worker(restarted)
    assert await count(pool, f"SELECT count(*) FROM {schema}.outbox WHERE published_at IS NULL") == 0
    assert await redis.xlen(stream) == 40  # every event twice on the stream: at-least-once

    consumer = spawn_worker("consumer_worker", backends, CF_TEST_STREAM=stream, CF_TEST_GROUP=group, CF_TEST_SCHEMA=schema)
    try:
        settled = await wait_until(lambda: every_entry_acked(redis, stream, group))
    finally:
        output = stop_worker(consumer)

    assert settled, output
    applied = await pool.fetch(f"SELECT event_id FROM {schema}.effects")
    assert sorted(r["event_id"] for r in applied) == sorted(e.event_id for e in events)
    # every republished copy was a no-op; the claimer may also have taken over entries that waited in the reader's
    # read longer than min_idle_ms (300 ms) under load, and those deliveries are no-ops too: at least 20, not exactly
    deduplicated = await pool.fetch(f"SELECT event_id FROM {schema}.duplicates")
    assert sorted({r["event_id"] for r in deduplicated}) == sorted(e.event_id for e in events)
    assert len(deduplicated) >= 20


async def every_entry_acked(redis: Redis, stream: str, group: str) -> bool:
    """Has `group` been delivered the last entry of `stream`, with nothing left pending?"""
    last_entry = (await redis.xrevrange(stream, count=1))[0][0]
    groups = {info["name"]: info for info in await redis.xinfo_groups(stream)}
    info = groups.get(group.encode())
    return info is not None and info["last-delivered-id"] == last_entry and info["pending"] == 0
