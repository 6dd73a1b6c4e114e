"""The commands the HTTP API calls (`submit_task`, `request_cancel`) against real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from services.common.runtime import Emitter, prepare_schema
from services.intake.commands import CancelRequest, cancel_many, request_cancel, submit_task
from services.intake.service import SPEC as INTAKE
from shared.delivery import create_pool
from shared.events import parse_event
from shared.settings import Settings
from tests.integration.intake.harness import a_submission


@pytest.fixture
async def pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    created = await create_pool(fresh_settings.database_dsn or "")
    await prepare_schema(created, INTAKE)
    yield created
    await created.close()


@pytest.fixture
def emitter() -> Emitter:
    return Emitter("intake", "console/test-1", "user:alice")


async def outbox(pool: asyncpg.Pool) -> list:
    return [parse_event(row["body"]) for row in await pool.fetch("SELECT body FROM intake.outbox ORDER BY position")]


async def test_submit_task_creates_once_per_key_and_returns_the_original(pool: asyncpg.Pool, emitter: Emitter) -> None:
    first = await submit_task(pool, emitter, a_submission(idempotency_key="http-1"), "user:alice")
    again = await submit_task(pool, emitter, a_submission(idempotency_key="http-1"), "user:bob")
    changed = await submit_task(pool, emitter, a_submission("changed", idempotency_key="http-1"), "user:bob")
    keyless = [await submit_task(pool, emitter, a_submission("no key"), "user:alice") for _ in range(2)]

    assert (first.created, first.problems) == (True, [])
    assert (again.task_id, again.created, again.problems) == (first.task_id, False, [])
    assert changed.conflict_with == first.task_id and [p.field for p in changed.problems] == ["idempotency_key"]
    assert all(o.created for o in keyless) and keyless[0].task_id != keyless[1].task_id
    events = await outbox(pool)
    assert [(e.type, e.data.task_id) for e in events] == [
        ("task.submitted", first.task_id), ("task.rejected", changed.task_id),
        ("task.submitted", keyless[0].task_id), ("task.submitted", keyless[1].task_id),
    ]  # fmt: skip
    assert events[0].actor == "user:alice" and events[0].producer == "console/test-1"
    assert events[2].data.idempotency_key == f"auto:{keyless[0].task_id}"
    assert await pool.fetchval("SELECT count(*) FROM intake.tasks") == 3


async def test_concurrent_submissions_with_one_key_create_one_task(pool: asyncpg.Pool, emitter: Emitter) -> None:
    outcomes = await asyncio.gather(
        *[submit_task(pool, emitter, a_submission(idempotency_key="race"), "user:alice") for _ in range(8)]
    )
    assert len({o.task_id for o in outcomes}) == 1
    assert sum(o.created for o in outcomes) == 1
    assert [e.type for e in await outbox(pool)] == ["task.submitted"]


async def test_an_invalid_submission_is_rejected_with_every_problem(pool: asyncpg.Pool, emitter: Emitter) -> None:
    outcome = await submit_task(pool, emitter, a_submission(gpus="two", priority_class="urgent"), "user:alice")

    assert not outcome.created
    assert {p.field for p in outcome.problems} == {"gpus", "priority_class"}
    [event] = await outbox(pool)
    assert (event.type, event.data.task_id, event.data.name) == ("task.rejected", outcome.task_id, "train-llm")
    assert {r.field for r in event.data.reasons} == {"gpus", "priority_class"}
    assert await pool.fetchval("SELECT count(*) FROM intake.tasks") == 0
    assert await pool.fetchval("SELECT name FROM intake.rejections WHERE task_id = $1", outcome.task_id) == "train-llm"


async def test_a_key_of_a_rejected_submission_can_be_used_by_its_fixed_version(pool: asyncpg.Pool, emitter: Emitter) -> None:
    rejected = await submit_task(pool, emitter, a_submission(gpus=0, idempotency_key="fix-me"), "user:alice")
    fixed = await submit_task(pool, emitter, a_submission(idempotency_key="fix-me"), "user:alice")
    assert rejected.problems and fixed.created and fixed.task_id != rejected.task_id


async def test_request_cancel_knows_only_existing_tasks(pool: asyncpg.Pool, emitter: Emitter) -> None:
    task = await submit_task(pool, emitter, a_submission(), "user:alice")

    assert await request_cancel(pool, emitter, task.task_id, "user:bob", reason="wrong data") is True
    assert await request_cancel(pool, emitter, "NOPE", "user:bob") is False
    cancel = (await outbox(pool))[-1]
    assert (cancel.type, cancel.subject, cancel.actor) == ("task.cancel_requested", f"task/{task.task_id}", "user:bob")
    assert (cancel.data.task_id, cancel.data.reason) == (task.task_id, "wrong data")


async def test_events_of_one_subject_in_one_batch_get_consecutive_sequence_numbers(
    pool: asyncpg.Pool, emitter: Emitter
) -> None:
    task = await submit_task(pool, emitter, a_submission(), "user:alice")
    async with pool.acquire() as conn, conn.transaction():
        known = await cancel_many(conn, emitter, [CancelRequest(task.task_id, "user:a"), CancelRequest(task.task_id, "user:b")])
    assert known == [True, True]
    assert [(e.type, e.subject_seq) for e in await outbox(pool)] == [
        ("task.submitted", 1), ("task.cancel_requested", 2), ("task.cancel_requested", 3),
    ]  # fmt: skip
