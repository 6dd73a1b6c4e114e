"""Type-routed delivery against real Redis and PostgreSQL: the gate appends each event to `cf:events`
and to the routed stream of every group that folds its type (shared.events.routing), in one MULTI and
in the same order; readiness reads only `cf:routed:readiness` — across a restart, and taking over an
entry a dead instance left pending there."""

from __future__ import annotations

from redis.asyncio import Redis

from services.gate.forwarder import Gate
from services.readiness.service import ReadinessSettings, make_spec
from shared.delivery.wire import ensure_group, wire_fields
from shared.events import Envelope, TaskReadinessChanged, TaskSubmitted, make_event
from shared.events.routing import ROUTES, type_name
from shared.events.subjects import task_subject
from shared.names import EVENTS_STREAM, READINESS_GROUP, producer_stream, routed_stream
from shared.settings import Settings
from tests.helpers.running_services import RunningServices, forward
from tests.helpers.task_events import TaskStory
from tests.integration.intake.harness import a_submission, distinct_published_events, published_events

READINESS = make_spec(ReadinessSettings(sweep_seconds=0.2))
ROUTED = routed_stream(READINESS_GROUP)


def a_submitted(task_id: str) -> TaskSubmitted:
    return make_event(
        TaskSubmitted, subject=task_subject(task_id), subject_seq=1, producer="intake/test", actor="user:a",
        data={"task_id": task_id, "idempotency_key": task_id, "submission": a_submission()},
    )  # type: ignore[return-value]  # fmt: skip


async def stream_ids(redis: Redis, stream: str) -> list[str]:
    return [fields[b"event_id"].decode() for _, fields in await redis.xrange(stream)]


async def reports_of(redis: Redis, task_id: str) -> list[TaskReadinessChanged]:
    return [e for e in await published_events(redis, "task.readiness_changed") if e.data.task_id == task_id]  # type: ignore[misc]


async def distinct_reports_of(redis: Redis, task_id: str) -> list[TaskReadinessChanged]:
    events = await distinct_published_events(redis, "task.readiness_changed")
    return [e for e in events if e.data.task_id == task_id]  # type: ignore[misc]


async def test_the_gate_appends_each_event_to_cf_events_and_to_the_routed_streams_of_its_type_in_order(redis: Redis) -> None:
    story = TaskStory("T-routed")
    events: list[Envelope] = [story.submitted(), story.readiness(ready=True), story.matched(), story.granted(queued=True),
                              story.succeeded(started_on="n1"), story.usage()]  # fmt: skip
    for event in events:
        await redis.xadd(producer_stream(event.producer.split("/")[0]), wire_fields(event))
    gate = Gate(redis, block_ms=10)
    while gate.forwarded < len(events):
        await gate.forward_once()

    forwarded = await stream_ids(redis, EVENTS_STREAM)
    assert sorted(forwarded) == sorted(e.event_id for e in events)
    kinds = {e.event_id: e.type for e in events}
    for group, types in ROUTES.items():
        folded = {type_name(cls) for cls in types}
        assert await stream_ids(redis, routed_stream(group)) == [i for i in forwarded if kinds[i] in folded], group
    submitted, _, _, granted, succeeded, _ = (e.event_id for e in events)
    assert await stream_ids(redis, ROUTED) == [submitted, succeeded]
    assert [i for i in await stream_ids(redis, routed_stream("matcher"))] == [submitted, granted, succeeded]
    assert await stream_ids(redis, routed_stream("alerts")) == [succeeded]


async def test_readiness_reads_its_routed_stream_only_and_across_a_restart(fresh_settings: Settings, redis: Redis) -> None:
    first, second = a_submitted("T-before"), a_submitted("T-while-down")
    await redis.xadd(producer_stream("intake"), wire_fields(first))  # as intake's relay: through the real gate
    async with RunningServices(fresh_settings, READINESS) as services:
        assert await services.wait_until(lambda: reports_of(redis, "T-before"))
        await services.stop_service(READINESS.name)
        await redis.xadd(producer_stream("intake"), wire_fields(second))
        assert await services.wait_until(lambda: _holds(redis, ROUTED, second.event_id))
        assert await reports_of(redis, "T-while-down") == []
        services.start_service(READINESS.name, READINESS)
        assert await services.wait_until(lambda: reports_of(redis, "T-while-down"))
        assert await services.wait_until(lambda: _nothing_pending(redis))  # acked after its report is out

    assert [g["name"] for g in await redis.xinfo_groups(ROUTED)] == [READINESS_GROUP.encode()]
    assert READINESS_GROUP.encode() not in [g["name"] for g in await redis.xinfo_groups(EVENTS_STREAM)]
    assert await stream_ids(redis, ROUTED) == [first.event_id, second.event_id]  # not its own reports
    # by event id: the outbox relay is at-least-once (a stop between its XADD and its COMMIT publishes again)
    assert [len(await distinct_reports_of(redis, task)) for task in ("T-before", "T-while-down")] == [1, 1]


async def test_an_entry_a_dead_instance_left_pending_on_the_routed_stream_is_claimed_and_applied_once(
    fresh_settings: Settings, redis: Redis
) -> None:
    orphan = a_submitted("T-orphan")
    await forward(redis, orphan)  # where the gate puts it: cf:events and cf:routed:readiness
    await ensure_group(redis, ROUTED, READINESS_GROUP, "0")
    [[_, [(entry_id, _)]]] = await redis.xreadgroup(READINESS_GROUP, "readiness-dead", {ROUTED: ">"}, count=1)
    # the instance died before its ack; its entry has been idle for an hour (XCLAIM's IDLE sets that)
    await redis.xclaim(ROUTED, READINESS_GROUP, "readiness-dead", 0, [entry_id], idle=3_600_000)
    async with RunningServices(fresh_settings, READINESS) as services:
        assert await services.wait_until(lambda: reports_of(redis, "T-orphan"))
        assert await services.wait_until(lambda: _nothing_pending(redis))

    assert len(await distinct_reports_of(redis, "T-orphan")) == 1


async def _holds(redis: Redis, stream: str, event_id: str) -> bool:
    return event_id in await stream_ids(redis, stream)


async def _nothing_pending(redis: Redis) -> bool:
    return (await redis.xpending(ROUTED, READINESS_GROUP))["pending"] == 0
