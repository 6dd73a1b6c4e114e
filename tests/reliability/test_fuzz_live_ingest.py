"""Fuzzing a LIVE intake through `cf:ingest` (hypothesis), not only the validator: whatever JSON-ish
body upstream sends — NaN, infinities, huge integers, booleans for numbers, NUL and lone surrogates
(as JSON escapes), deep or odd shapes — each entry becomes exactly one `task.submitted` or one
`task.rejected` naming its problems, stored by PostgreSQL; no batch fails, nothing is dead-lettered
as `failed`, nothing stays pending. The issue's hostile inputs are the first example."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from services.intake.service import SPEC as INTAKE
from shared.names import INGEST_STREAM
from shared.settings import Settings
from shared.submission import TaskSubmission
from tests.helpers.running_services import RunningServices
from tests.integration.intake.harness import deadletters, distinct_published_events, ingest_pending, published_events
from tests.reliability.hostile import HOSTILE, VALID
from tests.reliability.test_fuzz_submissions import HOSTILE_TEXT, JSONISH

FIELDS = st.sampled_from(sorted(TaskSubmission.model_fields)) | HOSTILE_TEXT
BODY = st.dictionaries(FIELDS, JSONISH, max_size=5).map(
    lambda overrides: json.dumps({**VALID, **overrides}, allow_nan=True, ensure_ascii=True)
) | JSONISH.map(lambda value: json.dumps(value, allow_nan=True, ensure_ascii=True))
DECIDED = ("task.submitted", "task.rejected")


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@example(bodies=[h.text for h in HOSTILE])
@given(bodies=st.lists(BODY, min_size=1, max_size=30))
async def test_every_fuzzed_entry_through_a_live_intake_is_one_task_or_one_named_rejection(
    fresh_settings: Settings, redis: Redis, bodies: list[str]
) -> None:
    async with RunningServices(fresh_settings, INTAKE) as services:
        seen = {e.event_id for e in await published_events(redis)}  # earlier examples' (this fixture is shared)
        for body in bodies:
            await redis.xadd(INGEST_STREAM, {"type": "task.submit", "payload": body})

        async def all_decided() -> bool:
            return len(await distinct_published_events(redis, seen=seen)) >= len(bodies)

        assert await services.wait_until(all_decided), "an entry got neither task.submitted nor task.rejected"
        assert await services.wait_until(_nothing_pending(redis)), "entries stayed pending in cf:ingest"
    decided = await distinct_published_events(redis, seen=seen)
    assert [e.type for e in decided if e.type in DECIDED] == [e.type for e in decided]
    assert len(decided) == len(bodies)
    for rejection in (e for e in decided if e.type == "task.rejected"):
        assert all(reason.field and reason.problem for reason in rejection.data.reasons)
    assert not [d for d in await deadletters(redis) if d.reason == "failed"]


def _nothing_pending(redis: Redis) -> Any:
    async def check() -> bool:
        return (await ingest_pending(redis)) == 0

    return check
