"""S3 errors other than "not found" are transient: they never decide readiness (real PostgreSQL;
the object store is a stand-in whose answers the test controls)."""

from __future__ import annotations

import asyncpg

from services.common.runtime import Emitter
from services.readiness.recheck import Checker
from services.readiness.store import insert_submitted, probe_targets
from shared.events import TaskSubmitted, make_event, parse_event
from shared.events.subjects import task_subject
from tests.integration.intake.harness import a_submission


class ScriptedStore:
    """HEAD answers: 'error' raises, 'missing' is not found, 'found' exists."""

    def __init__(self) -> None:
        self.answer = "error"
        self.heads: list[tuple[str, str]] = []

    async def head(self, bucket: str, key: str) -> object | None:
        self.heads.append((bucket, key))
        if self.answer == "error":
            raise ConnectionError("connection refused by the object store")
        return object() if self.answer == "found" else None


async def reported(readiness_pool: asyncpg.Pool) -> list[bool]:
    rows = await readiness_pool.fetch("SELECT body FROM readiness.outbox ORDER BY position")
    return [parse_event(row["body"]).data.ready for row in rows]


async def test_errors_neither_mark_ready_nor_unready(readiness_pool: asyncpg.Pool) -> None:
    event = make_event(
        TaskSubmitted, subject=task_subject("T1"), subject_seq=1, producer="intake/test", actor="user:a",
        data={"task_id": "T1", "idempotency_key": "k", "submission": a_submission(inputs=["s3://bkt/a.bin", "s3://bkt/b/"])},
    )  # fmt: skip
    async with readiness_pool.acquire() as conn, conn.transaction():
        await insert_submitted(conn, "readiness", [event])
    store = ScriptedStore()
    checker = Checker(readiness_pool, Emitter("readiness", "readiness/test", "service:readiness"), store)

    await checker.recheck(["T1"])
    assert await reported(readiness_pool) == []  # unknown: no first report on an error
    errors = await readiness_pool.fetch("SELECT available, last_error FROM readiness.inputs ORDER BY position")
    assert [(r["available"], "connection refused" in r["last_error"]) for r in errors] == [(None, True), (None, True)]

    store.answer = "missing"
    await checker.recheck(["T1"])
    store.answer = "error"
    await checker.recheck(["T1"])
    assert await reported(readiness_pool) == [False]
    assert await readiness_pool.fetchval("SELECT bool_or(available) FROM readiness.inputs") is False

    store.answer = "found"
    await checker.recheck(["T1"])
    store.answer = "error"
    await checker.recheck(["T1"])
    assert await reported(readiness_pool) == [False, True]
    assert sorted(set(store.heads)) == [("bkt", "a.bin"), ("bkt", "b/_READY")]


async def test_probe_targets_are_the_unknown_s3_inputs_of_open_tasks_each_key_once(readiness_pool: asyncpg.Pool) -> None:
    """What a re-check probes: inputs not known to exist, of tasks still open; a key two tasks share once;
    nothing for a closed task, a task without such inputs, or one not tracked at all."""
    shared, own, closed_only = "s3://bkt/shared.bin", "s3://bkt/own.bin", "s3://bkt/closed.bin"
    inputs = {"T1": [shared, own], "T2": [shared], "T3": [closed_only], "T4": []}
    events = [make_event(
        TaskSubmitted, subject=task_subject(task), subject_seq=1, producer="intake/test", actor="user:a",
        data={"task_id": task, "idempotency_key": f"k-{task}", "submission": a_submission(inputs=refs)},
    ) for task, refs in inputs.items()]  # fmt: skip
    async with readiness_pool.acquire() as conn, conn.transaction():
        await insert_submitted(conn, "readiness", events)
        await conn.execute("UPDATE readiness.tasks SET closed_at = now(), closed_by = 'test' WHERE task_id = 'T3'")

    keys = await probe_targets(readiness_pool, "readiness", ["T1", "T2", "T3", "T4", "T-unknown"])

    assert sorted(keys) == sorted([shared, own])
