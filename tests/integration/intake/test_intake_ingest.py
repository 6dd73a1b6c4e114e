"""Intake against real Redis and PostgreSQL: `cf:ingest` entries become events, rejections and
dead-letters; idempotency keys create one task; unreadable entries are dead-lettered with a reason."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import pytest
from redis.asyncio import Redis

from services.common.runtime import ServiceContext, prepare_schema
from services.intake.ingest import parse_ingest_entry
from services.intake.service import SPEC as INTAKE
from services.intake.service import handle_ingest_batch
from shared.delivery import create_pool
from shared.delivery.entry_steps import Entry
from shared.events import TaskRejected, TaskSubmitted
from shared.names import DEADLETTER_STREAM, INGEST_STREAM, INTAKE_GROUP, ingest_stream
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import (
    a_submission,
    deadletters,
    ingest_pending,
    published_events,
    xadd_ingest,
)


@pytest.fixture
async def db(fresh_settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(fresh_settings.database_dsn)
    yield conn
    await conn.close()


async def test_a_batch_with_valid_and_invalid_submissions(fresh_settings: Settings, redis: Redis, db: asyncpg.Connection) -> None:
    await xadd_ingest(redis, "task.submit", a_submission("first"), stream=ingest_stream("etl"), actor="user:admin")
    bad_id = await xadd_ingest(
        redis, "task.submit", {"name": "broken", "idempotency_key": "k-bad", "gpus": 0, "gpu": 1, "profile": "compute"}
    )
    await xadd_ingest(redis, "task.submit", a_submission("second"), actor="service:dispatcher")

    async with RunningServices(fresh_settings.model_copy(update={"ingest_upstreams": ("etl",)}), INTAKE) as services:

        async def settled() -> bool:
            return len(await published_events(redis)) == 3 and len(await deadletters(redis)) == 1

        assert await services.wait_until(settled)

    submitted = await published_events(redis, "task.submitted")
    [rejected] = await published_events(redis, "task.rejected")
    assert sorted(e.data.submission.name for e in submitted) == ["first", "second"]
    assert {e.actor for e in submitted} == {"upstream:etl", "upstream:ingest"}  # the streams', never the entries' `actor` fields
    assert isinstance(rejected, TaskRejected)
    reasons = {reason.field: reason for reason in rejected.data.reasons}
    assert set(reasons) == {"project", "priority_class", "gpus", "estimate_gpu_hours", "gpu"}
    assert reasons["gpus"].value == 0 and "at least 1" in reasons["gpus"].problem
    assert "did you mean 'gpus'" in reasons["gpu"].problem
    assert (rejected.data.name, rejected.data.idempotency_key, rejected.data.project) == ("broken", "k-bad", None)

    [dead] = await deadletters(redis)
    assert (dead.stream, dead.group, dead.entry_id, dead.reason) == (INGEST_STREAM, INTAKE_GROUP, bad_id, "invalid")
    assert rejected.data.task_id in dead.error and "gpu: got 1; expected no such field" in dead.error
    assert dead.original[b"type"] == b"task.submit" and b'"broken"' in dead.original[b"payload"]

    tasks = await db.fetch("SELECT task_id, name, actor, source FROM intake.tasks ORDER BY name")
    assert [(r["name"], r["actor"]) for r in tasks] == [("first", "upstream:etl"), ("second", "upstream:ingest")]
    assert tasks[0]["source"].startswith("ingest:etl:") and tasks[1]["source"].count(":") == 1
    assert {r["task_id"] for r in tasks} == {e.data.task_id for e in submitted}
    stored = await db.fetchrow("SELECT task_id, name, idempotency_key, problems FROM intake.rejections")
    assert (stored["task_id"], stored["name"], stored["idempotency_key"]) == (rejected.data.task_id, "broken", "k-bad")
    assert len(json.loads(stored["problems"])) == 5
    assert (await redis.xpending(INGEST_STREAM, INTAKE_GROUP))["pending"] == 0


async def test_a_repeated_idempotency_key_creates_one_task(fresh_settings: Settings, redis: Redis, db: asyncpg.Connection) -> None:
    await xadd_ingest(redis, "task.submit", a_submission("once", idempotency_key="k-1"))
    await xadd_ingest(redis, "task.submit", a_submission("once", idempotency_key="k-1"))  # same batch, same body
    async with RunningServices(fresh_settings, INTAKE) as services:

        async def first_batch_done() -> bool:
            return await ingest_pending(redis) == 0 and bool(await published_events(redis))

        assert await services.wait_until(first_batch_done)
        await xadd_ingest(redis, "task.submit", a_submission("once", idempotency_key="k-1"))  # a later batch, same body
        marker = await xadd_ingest(redis, "task.submit", a_submission("marker", idempotency_key="k-2"))

        async def marker_done() -> bool:
            return any(e.data.idempotency_key == "k-2" for e in await published_events(redis, "task.submitted"))

        assert await services.wait_until(marker_done), marker

    submitted = [e for e in await published_events(redis) if isinstance(e, TaskSubmitted)]
    assert [(e.data.submission.name, e.data.idempotency_key) for e in submitted] == [("once", "k-1"), ("marker", "k-2")]
    assert await db.fetchval("SELECT count(*) FROM intake.tasks WHERE idempotency_key = 'k-1'") == 1
    assert await deadletters(redis) == []


async def test_unreadable_entries_are_dead_lettered_with_the_reason(fresh_settings: Settings, redis: Redis) -> None:
    unknown = await xadd_ingest(redis, "task.sumbit", a_submission())
    not_json = await xadd_ingest(redis, "task.submit", '{"name": "x",')
    no_payload = (await redis.xadd(INGEST_STREAM, {"type": "data.ready"})).decode()
    no_type = (await redis.xadd(INGEST_STREAM, {"payload": "{}"})).decode()
    bad_cancel = await xadd_ingest(redis, "task.cancel", {"reason": "oops"})
    bad_ready = await xadd_ingest(redis, "data.ready", {"dataset": "clicks"})
    unknown_task = await xadd_ingest(redis, "task.cancel", {"task_id": "NO-SUCH-TASK"})
    await xadd_ingest(redis, "task.submit", a_submission("fine"))

    async with RunningServices(fresh_settings, INTAKE) as services:

        async def settled() -> bool:
            return len(await deadletters(redis)) == 7 and len(await published_events(redis)) == 1

        assert await services.wait_until(settled)

    errors = {dead.entry_id: dead.error for dead in await deadletters(redis)}
    assert all(dead.reason == "invalid" for dead in await deadletters(redis))
    assert "field 'type' is 'task.sumbit'; expected one of task.submit, task.cancel, data.ready" in errors[unknown]
    assert "field 'payload' is not valid JSON" in errors[not_json]
    assert "field 'payload' is missing" in errors[no_payload]
    assert "field 'type' is missing" in errors[no_type]
    assert "task.cancel entry is not valid" in errors[bad_cancel] and "task_id: missing" in errors[bad_cancel]
    assert "{dataset, version} with both fields, or {uri}" in errors[bad_ready]
    assert "'NO-SUCH-TASK' names no task intake knows" in errors[unknown_task]
    assert all(entry_id in errors[entry_id] for entry_id in (unknown, not_json, no_payload, no_type))
    assert [e.type for e in await published_events(redis)] == ["task.submitted"]
    assert await redis.xlen(DEADLETTER_STREAM) == 7


async def test_cancel_and_data_ready_entries_become_events(fresh_settings: Settings, redis: Redis) -> None:
    await xadd_ingest(redis, "task.submit", a_submission("to-cancel"))
    async with RunningServices(fresh_settings, INTAKE) as services:

        async def submitted() -> list[TaskSubmitted]:
            return await published_events(redis, "task.submitted")  # type: ignore[return-value]

        assert await services.wait_until(lambda: _non_empty(submitted()))
        [task] = await submitted()
        await xadd_ingest(redis, "task.cancel", {"task_id": task.data.task_id, "reason": "not needed"}, actor="user:bo")  # ignored
        await xadd_ingest(redis, "data.ready", {"dataset": "clicks", "version": 7, "source": "etl run 12"})
        await xadd_ingest(redis, "data.ready", {"uri": "s3://raw/day/2024-06-01.parquet"})

        async def settled() -> bool:
            return len(await published_events(redis)) == 4

        assert await services.wait_until(settled)

    cancel, *signals = (await published_events(redis))[1:]
    assert (cancel.type, cancel.subject, cancel.actor) == ("task.cancel_requested", task.subject, "upstream:ingest")
    assert (cancel.data.task_id, cancel.data.reason) == (task.data.task_id, "not needed")
    assert [(s.type, s.subject) for s in signals] == [
        ("data.ready_signalled", "data/clicks@7"),
        ("data.ready_signalled", "data/s3://raw/day/2024-06-01.parquet"),
    ]
    assert signals[0].data.input.version == "7" and signals[0].data.source == "etl run 12"
    assert await deadletters(redis) == []


async def _non_empty(items: object) -> bool:
    return bool(await items)  # type: ignore[misc]


async def test_a_redelivered_batch_is_applied_once(fresh_settings: Settings, redis: Redis, db: asyncpg.Connection) -> None:
    """As after a crash between the commit and the ack: the same entries are handled again."""
    await xadd_ingest(redis, "task.submit", a_submission("once"))
    await xadd_ingest(redis, "task.submit", a_submission("bad", gpus=0))
    entries = [parse_ingest_entry(Entry(i.decode(), f)) for i, f in await redis.xrange(INGEST_STREAM)]
    pool = await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=2)
    try:
        await prepare_schema(pool, INTAKE)
        ctx = ServiceContext(INTAKE, fresh_settings, pool, redis, broker=None, stop=asyncio.Event())  # type: ignore[arg-type]
        for _ in range(2):
            await handle_ingest_batch(ctx, "test-consumer", entries)
    finally:
        await pool.close()

    assert await db.fetchval("SELECT count(*) FROM intake.tasks") == 1
    assert await db.fetchval("SELECT count(*) FROM intake.rejections") == 1
    assert [r["type"] for r in await db.fetch("SELECT type FROM intake.outbox ORDER BY position")] == [
        "task.submitted", "task.rejected",
    ]  # fmt: skip
    assert len(await deadletters(redis)) == 1
