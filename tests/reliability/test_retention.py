"""Retention (issue 15: no stream was ever trimmed, outboxes and most inboxes never pruned):
an entry goes only once EVERY consumer group is past it, an outbox row only once its entry left
the stream, and `cardflow doctor` shows both."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from shared.delivery import create_pool, migrate_delivery
from shared.delivery.outbox import append_events
from shared.delivery.relay import OutboxRelay
from shared.delivery.retention import (
    GroupProgress,
    RetentionPolicy,
    prune_trimmed_outbox,
    safe_trim_id,
    schema_retention_report,
    stream_retention_report,
    trim_stream,
)
from shared.names import DEADLETTER_STREAM, routed_stream
from shared.settings import Settings
from tests.helpers.delivery_support import a_test_event

NOW_MS = 10_000_000
KEEP_NOTHING = RetentionPolicy(stream_keep=timedelta(0), outbox_keep=timedelta(0), inbox_keep=timedelta(0))


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([], None),  # nobody read anything: never trimmed
        ([GroupProgress("a", "500-0", None)], "500-0"),
        ([GroupProgress("a", "500-0", None), GroupProgress("b", "300-2", None)], "300-2"),
        ([GroupProgress("a", "500-0", "120-1"), GroupProgress("b", "900-0", None)], "120-1"),  # a pending entry holds it
        ([GroupProgress("a", "0-0", None)], None),  # a group that read nothing yet
        ([GroupProgress("a", "9999999-0", None)], "9000000-0"),  # younger than the retention window
    ],
)
def test_the_trim_point_is_where_every_group_is_past_and_the_window_has_passed(
    groups: list[GroupProgress], expected: str | None
) -> None:
    assert safe_trim_id(groups, NOW_MS, keep_ms=1_000_000) == expected


async def test_a_stream_is_trimmed_only_below_what_every_group_has_read_and_acked(redis: Redis) -> None:
    stream = "cf:test:retention"
    a_minute_ago_ms = int(time.time() * 1000) - 60_000  # older than KEEP_NOTHING's 0 even within one millisecond
    ids = [(await redis.xadd(stream, {"n": str(n)}, id=f"{a_minute_ago_ms}-{n + 1}")).decode() for n in range(10)]
    await redis.xgroup_create(stream, "fast", id="0")
    await redis.xgroup_create(stream, "slow", id="0")
    fast = await redis.xreadgroup("fast", "c", {stream: ">"})
    await redis.xack(stream, "fast", *[i for i, _ in fast[0][1]])
    await redis.xreadgroup("slow", "c", {stream: ">"}, count=6)
    await redis.xack(stream, "slow", *ids[:3])  # 3, 4, 5 stay pending; 6..9 not delivered to slow

    result = await trim_stream(redis, stream, KEEP_NOTHING)
    assert result.trim_point == ids[3] and result.trimmed == 3
    assert [i.decode() for i, _ in await redis.xrange(stream)] == ids[3:]

    await redis.xack(stream, "slow", *ids[3:6])
    await trim_stream(redis, stream, KEEP_NOTHING)
    assert [i.decode() for i, _ in await redis.xrange(stream)] == ids[5:], "nothing slow has not read goes"

    await redis.xadd(DEADLETTER_STREAM, {"n": "x"})
    await redis.xgroup_create(DEADLETTER_STREAM, "anyone", id="$")
    assert (await trim_stream(redis, DEADLETTER_STREAM, KEEP_NOTHING)).trimmed == 0
    lonely = "cf:test:no-groups"
    await redis.xadd(lonely, {"n": "1"})
    assert (await trim_stream(redis, lonely, KEEP_NOTHING)).trimmed == 0
    assert {r.stream for r in await stream_retention_report(redis)} >= {stream, lonely, DEADLETTER_STREAM}


async def test_a_routed_stream_keeps_what_its_group_read_for_routed_keep_not_stream_keep(redis: Redis) -> None:
    policy = RetentionPolicy(stream_keep=timedelta(hours=24), routed_keep=timedelta(0))
    # The routed stream's entries are a minute old: with routed_keep 0 an entry made in the trim's own millisecond
    # is not yet older than 0, and on a fast machine all of this can run within one millisecond.
    a_minute_ago_ms = int(time.time() * 1000) - 60_000
    for stream, first_ms in (("cf:test:kept-a-day", None), (routed_stream("test-retention"), a_minute_ago_ms)):
        for n in range(3):
            await redis.xadd(stream, {"n": str(n)}, id="*" if first_ms is None else f"{first_ms}-{n + 1}")
        await redis.xgroup_create(stream, "reader", id="0")
        read = await redis.xreadgroup("reader", "c", {stream: ">"})
        await redis.xack(stream, "reader", *[i for i, _ in read[0][1]])

    assert (await trim_stream(redis, routed_stream("test-retention"), policy)).trimmed == 2  # all read: only the last stays
    assert (await trim_stream(redis, "cf:test:kept-a-day", policy)).trimmed == 0  # read too, but younger than a day


async def test_an_outbox_row_is_pruned_only_once_its_entry_left_the_stream(fresh_settings: Settings, redis: Redis) -> None:
    pool = await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=2)
    try:
        await migrate_delivery(pool, "svc")
        stream = "cf:test:outbox"
        async with pool.acquire() as conn, conn.transaction():
            await append_events(conn, "svc", [a_test_event(n) for n in range(6)], stream=stream)
        await OutboxRelay(pool, redis, "svc").publish_pending()
        await redis.xgroup_create(stream, "reader", id="0")
        read = await redis.xreadgroup("reader", "c", {stream: ">"}, count=4)
        await redis.xack(stream, "reader", *[i for i, _ in read[0][1]])

        assert await prune_trimmed_outbox(pool, redis, "svc", timedelta(0)) == 0, "still in the stream"
        await trim_stream(redis, stream, KEEP_NOTHING)
        assert await prune_trimmed_outbox(pool, redis, "svc", timedelta(0)) == 3  # 4th is the trim point itself
        assert await prune_trimmed_outbox(pool, redis, "svc", timedelta(days=1)) == 0
        [report] = [r for r in await schema_retention_report(pool) if r.schema == "svc"]
        assert (report.outbox_rows, report.outbox_unpublished) == (3, 0)
    finally:
        await pool.close()


async def test_doctor_shows_streams_and_outboxes(fresh_settings: Settings, redis: Redis) -> None:
    from services.cli.doctor import DOCTOR_WORDS, _retention_tables
    from services.cli.lang import CliLang

    await redis.xadd("cf:test:doctor", {"n": "1"})
    redis_url, dsn = fresh_settings.redis_url or "", fresh_settings.database_dsn or ""
    streams, schemas = await _retention_tables(redis_url, dsn, DOCTOR_WORDS[CliLang.EN])
    assert streams.row_count >= 1 and schemas.columns[0].header == "schema"
    streams_zh, schemas_zh = await _retention_tables(redis_url, dsn, DOCTOR_WORDS[CliLang.ZH])
    assert streams_zh.row_count == streams.row_count and schemas_zh.columns[0].header != "schema"
