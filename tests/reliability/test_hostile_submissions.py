"""Hostile submissions: every one is rejected with the problem named — at validation (pure), and
through `cf:ingest` with a real intake and views (one `task.rejected` each, never a stuck task,
never a failed batch), while the valid submissions of the same batch become tasks."""

from __future__ import annotations

import json
import math

import pytest
from redis.asyncio import Redis

from services.console.projector import SPEC as VIEWS
from services.console.views import load_task
from services.intake.service import SPEC as INTAKE
from shared.events import TaskRejected, TaskSubmitted
from shared.names import INGEST_STREAM, INTAKE_GROUP
from shared.settings import Settings
from shared.submission import Problem, SubmissionInvalid, validate_submission
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import deadletters, published_events
from tests.reliability.hostile import HOSTILE, Hostile, a_valid


def storable(problem: Problem) -> bool:
    """True when PostgreSQL can keep the problem as jsonb: finite numbers, UTF-8 text without NUL."""
    text = json.dumps(problem.model_dump(mode="json"), allow_nan=False, ensure_ascii=False)  # raises on NaN
    text.encode("utf-8")  # raises on an unpaired surrogate
    return "\x00" not in repr(problem.model_dump(mode="json"))


def names_field(problems: list[Problem], hostile: Hostile) -> bool:
    return any(p.field == hostile.field or p.field.startswith(hostile.field + "[") for p in problems)


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.label for h in HOSTILE])
def test_each_hostile_submission_is_invalid_with_its_field_named_and_storable_problems(hostile: Hostile) -> None:
    with pytest.raises(SubmissionInvalid) as caught:
        validate_submission(hostile.text)
    problems = caught.value.problems
    assert names_field(problems, hostile), [str(p) for p in problems]
    assert all(storable(p) for p in problems), problems


def test_numbers_are_strict_and_finite_everywhere() -> None:
    body = json.loads(a_valid("strict"))
    for field, value in [("gpus", True), ("gpus", 2.0), ("priority", False), ("estimate_gpu_hours", "1")]:
        with pytest.raises(SubmissionInvalid):
            validate_submission({**body, field: value})
    with pytest.raises(SubmissionInvalid):
        validate_submission({**body, "min_vram_gb": math.inf})
    assert validate_submission({**body, "estimate_gpu_hours": 2}).estimate_gpu_hours == 2.0


async def test_a_batch_of_hostile_and_valid_entries_on_cf_ingest(fresh_settings: Settings, redis: Redis) -> None:
    """Issue 15: NaN, NUL, surrogates failed whole batches five times and ended as `failed` dead
    letters; gpus 2^31 and estimates of 1e308 were accepted and stuck. Now: one task.rejected per
    hostile entry naming the field, every valid entry a task, nothing failed, nothing pending."""
    valid_names = [f"valid-{i}" for i in range(200 - len(HOSTILE))]
    entries = [h.text for h in HOSTILE] + [a_valid(name) for name in valid_names]
    for text in entries:
        await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": text})

    async with RunningServices(fresh_settings, INTAKE, VIEWS) as services:

        async def all_decided() -> bool:
            return len(await published_events(redis)) >= len(entries)

        assert await services.wait_until(all_decided)
        rejected = [e for e in await published_events(redis, "task.rejected") if isinstance(e, TaskRejected)]

        async def all_projected() -> bool:
            return all([await load_task(services.pool, e.data.task_id) for e in rejected])

        assert await services.wait_until(all_projected), "every rejection reaches the views (PostgreSQL)"

    submitted = [e for e in await published_events(redis, "task.submitted") if isinstance(e, TaskSubmitted)]
    assert sorted(e.data.submission.name for e in submitted) == sorted(valid_names)
    assert len(rejected) == len(HOSTILE)
    for hostile, rejection in zip(HOSTILE, rejected, strict=True):  # intake emits in entry order
        assert rejection.data.name in (hostile.label, None)  # None: the name itself was unreadable
        reasons = [Problem(field=r.field, value=r.value, expected=r.problem) for r in rejection.data.reasons]
        assert names_field(reasons, hostile), (hostile.label, reasons)
    dead = await deadletters(redis)
    assert {d.reason for d in dead} == {"invalid"}, "rejection copies only: no failed or exhausted batch"
    assert (await redis.xpending(INGEST_STREAM, INTAKE_GROUP))["pending"] == 0


async def test_a_reused_idempotency_key_with_another_body_is_rejected_on_cf_ingest(
    fresh_settings: Settings, redis: Redis
) -> None:
    body = json.loads(a_valid("nightly")) | {"idempotency_key": "nightly-1"}
    for payload in (body, body, body | {"gpus": 2}):  # same key: once as is, again as is, then another body
        await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": json.dumps(payload)})
    async with RunningServices(fresh_settings, INTAKE) as services:
        assert await services.wait_until(lambda: _events_at_least(redis, 2))
        await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": json.dumps(body | {"name": "renamed"})})
        assert await services.wait_until(lambda: _events_at_least(redis, 3))
    [submitted] = await published_events(redis, "task.submitted")
    rejections = [e for e in await published_events(redis, "task.rejected") if isinstance(e, TaskRejected)]
    assert len(rejections) == 2, "one conflict within a batch, one against the stored key"
    for rejection in rejections:
        [reason] = rejection.data.reasons
        assert reason.field == "idempotency_key" and submitted.data.task_id in reason.problem


async def _events_at_least(redis: Redis, count: int) -> bool:
    return len(await published_events(redis)) >= count
