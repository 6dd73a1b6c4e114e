"""A batch of submissions with nothing to probe is tracked and reported in ONE transaction (real
PostgreSQL): a failure while reporting leaves nothing behind, so the redelivered batch reports at once
instead of leaving the task tracked but unreported until a sweep finds it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from services.common.runtime import ServiceContext
from services.readiness.recheck import Checker
from services.readiness.service import SPEC as READINESS
from services.readiness.service import handle_events
from shared.events import TaskSubmitted, make_event, parse_event
from shared.events.subjects import task_subject
from shared.settings import Settings
from tests.integration.intake.harness import a_submission


class NoObjectStore:
    """Nothing here has an S3 input: a HEAD would be a bug."""

    async def head(self, bucket: str, key: str) -> object | None:
        raise AssertionError(f"probed s3://{bucket}/{key}")


def a_submitted(task_id: str, **submission: object) -> TaskSubmitted:
    return make_event(
        TaskSubmitted, subject=task_subject(task_id), subject_seq=1, producer="intake/test", actor="user:a",
        data={"task_id": task_id, "idempotency_key": task_id, "submission": a_submission(**submission)},
    )  # fmt: skip


async def fail_next_report(readiness_pool: asyncpg.Pool) -> None:
    """The next insert into readiness's outbox fails (once), as a lost connection or a full disk would."""
    await readiness_pool.execute("""
        CREATE TABLE readiness.fail_once (armed boolean NOT NULL);
        INSERT INTO readiness.fail_once VALUES (true);
        CREATE FUNCTION readiness.fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (SELECT armed FROM readiness.fail_once) THEN
                UPDATE readiness.fail_once SET armed = false;
                RAISE EXCEPTION 'the report could not be written';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER fail_once BEFORE INSERT ON readiness.outbox FOR EACH STATEMENT EXECUTE FUNCTION readiness.fail_once();
    """)  # the UPDATE is rolled back with the failed statement: disarm it outside the failing transaction


async def disarm(readiness_pool: asyncpg.Pool) -> None:
    await readiness_pool.execute("UPDATE readiness.fail_once SET armed = false")


async def reports(readiness_pool: asyncpg.Pool) -> list[tuple[str, bool]]:
    rows = await readiness_pool.fetch("SELECT body FROM readiness.outbox ORDER BY position")
    return [(event.data.task_id, event.data.ready) for event in map(parse_event, (row["body"] for row in rows))]


async def test_a_failed_report_leaves_the_submission_untracked_and_its_redelivery_reports_at_once(
    fresh_settings: Settings, readiness_pool: asyncpg.Pool
) -> None:
    ctx = ServiceContext(READINESS, fresh_settings, readiness_pool, redis=None, broker=None, stop=asyncio.Event())  # type: ignore[arg-type]
    checker = Checker(readiness_pool, ctx.emitter, NoObjectStore(), sweep_batch=10)
    batch = [a_submitted("T-plain"), a_submitted("T-dataset", inputs=[{"dataset": "clicks", "version": 3}])]
    await fail_next_report(readiness_pool)

    with pytest.raises(asyncpg.RaiseError, match="could not be written"):
        await handle_events(ctx, checker, batch)
    assert await readiness_pool.fetchval("SELECT count(*) FROM readiness.tasks") == 0  # nothing tracked without its report
    assert await readiness_pool.fetchval("SELECT count(*) FROM readiness.inputs") == 0

    await disarm(readiness_pool)
    await handle_events(ctx, checker, batch)  # the consumer's redelivery of the same batch
    assert sorted(await reports(readiness_pool)) == [("T-dataset", False), ("T-plain", True)]
    checked = await readiness_pool.fetch("SELECT task_id, ready, checked_at IS NOT NULL AS checked FROM readiness.tasks ORDER BY task_id")
    assert [(r["task_id"], r["ready"], r["checked"]) for r in checked] == [("T-dataset", False, True), ("T-plain", True, True)]


async def test_a_submission_with_an_s3_input_is_still_probed_outside_the_transaction(
    fresh_settings: Settings, readiness_pool: asyncpg.Pool
) -> None:
    """The one-transaction path is only for what needs no HEAD: a batch with an S3 input probes first."""
    ctx = ServiceContext(READINESS, fresh_settings, readiness_pool, redis=None, broker=None, stop=asyncio.Event())  # type: ignore[arg-type]
    heads: list[str] = []

    class Missing:
        async def head(self, bucket: str, key: str) -> object | None:
            heads.append(f"s3://{bucket}/{key}")
            return None

    checker = Checker(readiness_pool, ctx.emitter, Missing())
    await handle_events(ctx, checker, [a_submitted("T-s3", inputs=["s3://bkt/a.bin"]), a_submitted("T-plain")])
    assert heads == ["s3://bkt/a.bin"]
    assert sorted(await reports(readiness_pool)) == [("T-plain", True), ("T-s3", False)]
