"""Readiness against real Redis, PostgreSQL and S3, with intake in front: objects and `_READY`
markers that appear later, datasets signalled through `cf:ingest`, redelivery, closed tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from redis.asyncio import Redis

from services.common.runtime import Emitter
from services.intake.service import SPEC as INTAKE
from services.readiness.board import load_board
from services.readiness.recheck import Checker
from services.readiness.service import ReadinessSettings, make_spec
from services.readiness.store import record_signals
from shared.delivery import create_pool
from shared.events import DataReadySignalled, Envelope, TaskReadinessChanged, TaskSubmitted, make_event, parse_event
from shared.events.subjects import task_subject
from shared.settings import Settings
from shared.storage import ObjectStore, open_data_store
from tests.helpers.delivery_support import unique
from tests.helpers.running_services import RunningServices, forward
from tests.integration.intake.harness import a_submission, published_events, xadd_ingest

READINESS = make_spec(ReadinessSettings(sweep_seconds=0.2))


@pytest.fixture
async def pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    created = await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=3)
    yield created
    await created.close()


@pytest.fixture
async def store(fresh_settings: Settings) -> AsyncIterator[ObjectStore]:
    async with open_data_store(fresh_settings) as opened:
        yield opened


@pytest.fixture
async def bucket(store: ObjectStore) -> str:
    name = unique("rd").replace("_", "-")
    await store.ensure_bucket(name)
    return name


async def readiness_of(redis: Redis, task_id: str) -> list[TaskReadinessChanged]:
    events = await published_events(redis, "task.readiness_changed")
    return [e for e in events if e.data.task_id == task_id]  # type: ignore[misc]


async def committed_reports(pool: asyncpg.Pool, task_id: str) -> list[bool]:
    """`ready` of each readiness report of the task committed so far (published or not yet)."""
    rows = await pool.fetch(
        "SELECT body FROM readiness.outbox WHERE subject = $1 ORDER BY position", task_subject(task_id)
    )
    return [parse_event(row["body"]).data.ready for row in rows]


async def submitted_task(services: RunningServices, redis: Redis, name: str) -> TaskSubmitted:
    async def found() -> bool:
        return any(e.data.submission.name == name for e in await published_events(redis, "task.submitted"))

    assert await services.wait_until(found)
    return next(e for e in await published_events(redis, "task.submitted") if e.data.submission.name == name)  # type: ignore[return-value]


async def swept_after(pool: asyncpg.Pool, task_id: str, services: RunningServices) -> None:
    """Wait until a check of `task_id` started after now has completed."""
    since = await pool.fetchval("SELECT now()")

    async def checked() -> bool:
        return bool(await pool.fetchval("SELECT checked_at > $2 FROM readiness.tasks WHERE task_id = $1", task_id, since))

    assert await services.wait_until(checked)


async def test_an_object_that_appears_later_makes_the_task_ready_via_the_sweep(
    fresh_settings: Settings, redis: Redis, store: ObjectStore, bucket: str
) -> None:
    uri = f"s3://{bucket}/day/2024-06-01.parquet"
    await xadd_ingest(redis, "task.submit", a_submission("needs-object", inputs=[uri]))
    async with RunningServices(fresh_settings, INTAKE, READINESS) as services:
        task = await submitted_task(services, redis, "needs-object")

        async def first_check() -> bool:
            return len(await readiness_of(redis, task.data.task_id)) == 1

        assert await services.wait_until(first_check)
        await store.put(bucket, "day/2024-06-01.parquet", b"rows")

        async def ready() -> bool:
            return any(e.data.ready for e in await readiness_of(redis, task.data.task_id))

        assert await services.wait_until(ready)

    first, second = await readiness_of(redis, task.data.task_id)
    assert (first.data.ready, first.data.missing_inputs, first.data.ready_fraction) == (False, (uri,), 0.0)
    assert (second.data.ready, second.data.missing_inputs, second.data.ready_fraction) == (True, (), 1.0)
    assert first.causation_id == task.event_id and first.correlation_id == task.event_id
    assert (first.subject, first.subject_seq, second.subject_seq) == (task.subject, 1, 2)
    assert first.actor == "service:readiness"


async def test_a_prefix_is_ready_only_once_its_ready_marker_exists(
    fresh_settings: Settings, redis: Redis, pool: asyncpg.Pool, store: ObjectStore, bucket: str
) -> None:
    await xadd_ingest(redis, "task.submit", a_submission("needs-prefix", inputs=[f"s3://{bucket}/shards/"]))
    async with RunningServices(fresh_settings, INTAKE, READINESS) as services:
        task = await submitted_task(services, redis, "needs-prefix")
        await store.put(bucket, "shards/part-0000", b"data")
        await swept_after(pool, task.data.task_id, services)
        assert await committed_reports(pool, task.data.task_id) == [False]

        await store.put(bucket, "shards/_READY", b"")

        async def ready() -> bool:
            return [e.data.ready for e in await readiness_of(redis, task.data.task_id)] == [False, True]

        assert await services.wait_until(ready)
        [row] = await load_board(pool)
        assert (row.task_id, row.status, row.missing_inputs, row.ready_fraction) == (task.data.task_id, "ready", (), 1.0)


async def test_a_dataset_signalled_through_cf_ingest_makes_waiting_tasks_ready(
    fresh_settings: Settings, redis: Redis, pool: asyncpg.Pool, store: ObjectStore, bucket: str
) -> None:
    await store.put(bucket, "vocab.json", b"{}")
    inputs = [{"dataset": "clicks", "version": 7}, f"s3://{bucket}/vocab.json"]
    await xadd_ingest(redis, "task.submit", a_submission("needs-dataset", inputs=inputs))
    await xadd_ingest(redis, "task.submit", a_submission("no-inputs"))
    async with RunningServices(fresh_settings, INTAKE, READINESS) as services:
        task = await submitted_task(services, redis, "needs-dataset")
        plain = await submitted_task(services, redis, "no-inputs")

        async def both_checked() -> bool:
            return bool(await readiness_of(redis, task.data.task_id)) and bool(await readiness_of(redis, plain.data.task_id))

        assert await services.wait_until(both_checked)
        board = {row.task_id: row for row in await load_board(pool)}
        assert board[task.data.task_id].missing_inputs == ("clicks@7",)
        await xadd_ingest(redis, "data.ready", {"dataset": "clicks", "version": "7"}, actor="upstream:etl")

        async def ready() -> bool:
            return len(await readiness_of(redis, task.data.task_id)) == 2

        assert await services.wait_until(ready)

    [signal] = await published_events(redis, "data.ready_signalled")
    first, second = await readiness_of(redis, task.data.task_id)
    assert (first.data.ready, first.data.ready_fraction, str(first.data.missing_inputs[0])) == (False, 0.5, "clicks@7")
    assert (second.data.ready, second.causation_id, second.correlation_id) == (True, signal.event_id, task.event_id)
    [at_once] = await readiness_of(redis, plain.data.task_id)
    assert (at_once.data.ready, at_once.data.ready_fraction) == (True, 1.0)


async def test_a_redelivered_event_is_applied_once(fresh_settings: Settings, redis: Redis, pool: asyncpg.Pool) -> None:
    submitted = make_event(
        TaskSubmitted, subject=task_subject("T-redelivered"), subject_seq=1, producer="intake/test", actor="user:a",
        data={"task_id": "T-redelivered", "idempotency_key": "k", "submission": a_submission()},
    )  # fmt: skip
    for _ in range(3):
        await forward(redis, submitted)
    marker = make_event(
        TaskSubmitted, subject=task_subject("T-marker"), subject_seq=1, producer="intake/test", actor="user:a",
        data={"task_id": "T-marker", "idempotency_key": "m", "submission": a_submission()},
    )  # fmt: skip
    async with RunningServices(fresh_settings, READINESS) as services:
        await forward(redis, submitted)  # a later batch too
        await forward(redis, marker)

        async def both_checked() -> bool:  # each task's report is relayed by its own transaction: in any order
            return bool(await readiness_of(redis, "T-marker")) and bool(await readiness_of(redis, "T-redelivered"))

        assert await services.wait_until(both_checked)

    assert [e.data.ready for e in await readiness_of(redis, "T-redelivered")] == [True]
    assert await pool.fetchval("SELECT count(*) FROM readiness.tasks WHERE task_id = 'T-redelivered'") == 1
    assert await pool.fetchval("SELECT count(*) FROM readiness.inbox") == 0  # applied once by the insert itself


async def test_a_cancelled_task_is_no_longer_checked(
    fresh_settings: Settings, redis: Redis, pool: asyncpg.Pool, store: ObjectStore, bucket: str
) -> None:
    await xadd_ingest(redis, "task.submit", a_submission("doomed", inputs=[f"s3://{bucket}/late.bin"]))
    await xadd_ingest(redis, "task.submit", a_submission("witness", inputs=[f"s3://{bucket}/never.bin"]))
    async with RunningServices(fresh_settings, INTAKE, READINESS) as services:
        doomed = await submitted_task(services, redis, "doomed")
        witness = await submitted_task(services, redis, "witness")

        async def first_checks() -> bool:
            return bool(await readiness_of(redis, doomed.data.task_id))

        assert await services.wait_until(first_checks)
        cancelled = make_event(
            "task.cancelled", subject=doomed.subject, subject_seq=9, producer="dispatcher/test", actor="user:a",
            data={"task_id": doomed.data.task_id, "reason": "not needed"},
        )  # fmt: skip
        await forward(redis, cancelled)

        async def closed() -> bool:
            return await pool.fetchval("SELECT closed_by FROM readiness.tasks WHERE task_id = $1", doomed.data.task_id) == "task.cancelled"

        assert await services.wait_until(closed)
        await store.put(bucket, "late.bin", b"x")
        await swept_after(pool, witness.data.task_id, services)

    assert await committed_reports(pool, doomed.data.task_id) == [False]
    assert [row.task_id for row in await load_board(pool)] == [witness.data.task_id]


async def test_a_closing_event_takes_no_inbox_row_and_its_redelivery_keeps_the_first_close(
    fresh_settings: Settings, redis: Redis, pool: asyncpg.Pool, bucket: str
) -> None:
    await xadd_ingest(redis, "task.submit", a_submission("ends", inputs=[f"s3://{bucket}/a.bin"]))
    await xadd_ingest(redis, "task.submit", a_submission("marker", inputs=[f"s3://{bucket}/b.bin"]))
    async with RunningServices(fresh_settings, INTAKE, READINESS) as services:
        ends = await submitted_task(services, redis, "ends")
        marker = await submitted_task(services, redis, "marker")
        cancelled = a_closing(ends, "task.cancelled", 9, reason="not needed")
        await forward(redis, cancelled)
        assert await services.wait_until(lambda: closed_as(pool, ends, "task.cancelled"))
        inbox = {row["event_id"] for row in await pool.fetch("SELECT event_id FROM readiness.inbox")}
        assert cancelled.event_id not in inbox and not {ends.event_id, marker.event_id} & inbox  # submissions neither
        failed = a_closing(ends, "task.failed", 10, lease_id=None, error="late", exit_code=1)
        for event in (cancelled, failed, a_closing(marker, "task.cancelled", 9)):  # a redelivery, a later close
            await forward(redis, event)
        assert await services.wait_until(lambda: closed_as(pool, marker, "task.cancelled"))
        assert await closed_as(pool, ends, "task.cancelled")  # the first close stays


def a_closing(task: TaskSubmitted, kind: str, seq: int, **data: object) -> Envelope:
    return make_event(kind, subject=task.subject, subject_seq=seq, producer="dispatcher/test",
                      actor="service:dispatcher", data={"task_id": task.data.task_id, **data})  # fmt: skip


async def closed_as(pool: asyncpg.Pool, task: TaskSubmitted, kind: str) -> bool:
    return await pool.fetchval("SELECT closed_by FROM readiness.tasks WHERE task_id = $1", task.data.task_id) == kind


async def test_a_sweep_that_sees_a_signal_before_its_handler_names_the_signal_as_the_cause(
    fresh_settings: Settings, redis: Redis, pool: asyncpg.Pool, store: ObjectStore
) -> None:
    """The handler records a signal, commits, then re-checks; a sweep may run in between and find
    the task ready first. Its report must still say the signal caused it (audit `why` reads it)."""
    await xadd_ingest(redis, "task.submit", a_submission("late-dataset", inputs=[{"dataset": "clicks", "version": 9}]))
    async with RunningServices(fresh_settings, INTAKE, make_spec(ReadinessSettings(sweep_seconds=3600))) as services:
        task = await submitted_task(services, redis, "late-dataset")

        async def checked() -> bool:
            return bool(await readiness_of(redis, task.data.task_id))

        assert await services.wait_until(checked)
    signal = make_event(
        DataReadySignalled, subject="dataset/clicks@9", subject_seq=1, producer="intake/test", actor="upstream:etl",
        data={"input": {"dataset": "clicks", "version": 9}},
    )  # fmt: skip
    async with pool.acquire() as conn, conn.transaction():  # the handler's first transaction, alone
        assert await record_signals(conn, "readiness", [signal]) == {task.data.task_id: signal.event_id}
    checker = Checker(pool, Emitter("readiness", "readiness/test", "service:readiness"), store)
    [report] = await checker.sweep()  # the sweep gets there before the handler's re-check
    assert (report.data.ready, report.causation_id, report.correlation_id) == (True, signal.event_id, task.event_id)
