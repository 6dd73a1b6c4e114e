"""Trust boundaries on Redis (issue 15: "any agent reads every inbox"; "a task.succeeded written
straight onto cf:events by a non-dispatcher producer was believed by the views and the ledger").

Each process has its own Redis ACL user (shared.redis_acl), made by the embedded Redis of the test
session exactly as `cardflow up` makes them. The server refuses (NOPERM) an agent reading another
agent's inbox and any user but the gate writing `cf:events`; a service writing another service's
event type onto its own stream is refused by the gate, dead-lettered with the reason, and never
reaches the views or the ledger.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from services.console.projector import SPEC as VIEWS
from services.console.views import load_task
from services.ledger.service import SPEC as LEDGER
from shared.delivery.deadletter import read_deadletters
from shared.delivery.wire import ensure_group, wire_fields
from shared.embedded.redis_users import load_users
from shared.events import make_event
from shared.names import (
    AGENT_GROUP,
    DEADLETTER_STREAM,
    EVENTS_STREAM,
    INGEST_STREAM,
    MATCHER_GROUP,
    READINESS_GROUP,
    REPORTS_STREAM,
    agent_inbox,
    ingest_stream,
    producer_stream,
    routed_stream,
)
from shared.redis_acl import upstream_user, user_url
from shared.settings import Settings
from tests.helpers.redis_users import as_user, enrolled_agent_url
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory

FIELDS = {"event_id": "x", "type": "task.succeeded", "subject": "task/T1", "event": "{}"}


@asynccontextmanager
async def client(url: str) -> AsyncIterator[Redis]:
    redis = Redis.from_url(url)
    try:
        yield redis
    finally:
        await redis.aclose()


def user_redis(settings: Settings, user: str) -> Callable[[], object]:
    own = as_user(settings, user)
    assert own.redis_url != settings.redis_url, f"the session's Redis has no user {user}"
    return lambda: client(own.redis_url or "")


async def test_an_agent_reads_only_its_own_inbox_and_only_appends_reports(fresh_settings: Settings, redis: Redis) -> None:
    users_dir = Path(fresh_settings.data_dir)
    admin_url = fresh_settings.redis_url or ""
    own, other = agent_inbox("trust-a"), agent_inbox("trust-b")
    await redis.xadd(other, {"type": "lease.grant", "event": '{"fencing_token": 7}'})
    await ensure_group(redis, other, AGENT_GROUP)
    async with client(enrolled_agent_url(admin_url, users_dir, "trust-a")) as agent:
        await ensure_group(agent, own, AGENT_GROUP)
        assert await agent.xreadgroup(AGENT_GROUP, "a", {own: ">"}) == []
        assert await agent.xadd(REPORTS_STREAM, {"type": "agent.heartbeat"})
        refused = {
            "read another inbox in its group": agent.xreadgroup(AGENT_GROUP, "a", {other: ">"}),
            "range over another inbox": agent.xrange(other),
            "read the reports of other agents": agent.xreadgroup("dispatcher", "a", {REPORTS_STREAM: ">"}),
            "write cf:events": agent.xadd(EVENTS_STREAM, FIELDS),
            "write a producer stream": agent.xadd(producer_stream("dispatcher"), FIELDS),
            "write its own inbox": agent.xadd(own, FIELDS),
            "drop its inbox group": agent.xgroup_destroy(own, AGENT_GROUP),
            "read the dead letters": agent.xrange(DEADLETTER_STREAM),
        }
        for what, call in refused.items():
            with pytest.raises(NoPermissionError):
                await call
                pytest.fail(f"an agent could {what}")
    assert len(await redis.xrange(other)) == 1  # untouched


async def test_only_the_gate_writes_cf_events_and_each_service_only_its_own_stream(fresh_settings: Settings) -> None:
    async with user_redis(fresh_settings, "service.matcher")() as matcher:
        assert await matcher.xadd(producer_stream("matcher"), FIELDS)
        for stream in (EVENTS_STREAM, routed_stream(MATCHER_GROUP), routed_stream(READINESS_GROUP),
                       producer_stream("dispatcher"), INGEST_STREAM, REPORTS_STREAM, agent_inbox("a1")):  # fmt: skip
            with pytest.raises(NoPermissionError):
                await matcher.xadd(stream, FIELDS)
    async with user_redis(fresh_settings, "service.dispatcher")() as dispatcher:
        assert await dispatcher.xadd(agent_inbox("trust-c"), FIELDS)  # grants go to agents' inboxes
        with pytest.raises(NoPermissionError):
            await dispatcher.xadd(EVENTS_STREAM, FIELDS)
    async with user_redis(fresh_settings, "gate")() as gate:
        assert await gate.xadd(EVENTS_STREAM, FIELDS)
        assert await gate.xadd(routed_stream(READINESS_GROUP), FIELDS)  # and alone the routed streams
        with pytest.raises(NoPermissionError):
            await gate.xadd(producer_stream("dispatcher"), FIELDS)


async def test_an_upstream_appends_only_to_its_own_ingest_stream_and_reads_nothing(fresh_settings: Settings, redis: Redis) -> None:
    user = upstream_user("trust-pipeline")
    await redis.execute_command("ACL", "SETUSER", *user.setuser_args("pw-trust"))
    own = ingest_stream("trust-pipeline")
    async with client(user_url(fresh_settings.redis_url or "", user.name, "pw-trust")) as upstream:
        assert await upstream.xadd(own, {"type": "task.submit", "payload": "{}"})
        refused = {  # the shared stream and another upstream's would record another actor
            "write the shared cf:ingest": upstream.xadd(INGEST_STREAM, {"type": "task.submit", "payload": "{}"}),
            "write another upstream's stream": upstream.xadd(ingest_stream("trust-other"), {"type": "task.submit"}),
            "read its own stream": upstream.xrange(own),
            "write cf:events": upstream.xadd(EVENTS_STREAM, FIELDS),
            "read cf:events": upstream.xrange(EVENTS_STREAM),
        }
        for what, call in refused.items():
            with pytest.raises(NoPermissionError):
                await call
                pytest.fail(f"an upstream could {what}")
    await redis.execute_command("ACL", "DELUSER", user.name)


async def test_a_success_forged_by_a_non_dispatcher_writer_never_reaches_the_views_or_the_ledger(fresh_settings: Settings) -> None:
    story = TaskStory("T-gate")
    honest = [story.submitted(), story.queued(), story.granted(), story.started()]
    forged = make_event(  # claims to be the dispatcher; written with the matcher's credentials
        "task.succeeded", subject=honest[0].subject, subject_seq=99, producer="dispatcher/forged", actor="service:dispatcher",
        data={"task_id": "T-gate", "lease_id": story.lease_id, "output_units": 1e9},
    )
    owner_of = {"task.submitted": "intake"}
    async with RunningServices(fresh_settings, VIEWS, LEDGER) as services:
        for event in honest:  # each through its owner's stream, as the relays write them
            async with user_redis(fresh_settings, f"service.{owner_of.get(event.type, 'dispatcher')}")() as owner:
                await owner.xadd(producer_stream(owner_of.get(event.type, "dispatcher")), wire_fields(event))
        async with user_redis(fresh_settings, "service.matcher")() as matcher:
            await matcher.xadd(producer_stream("matcher"), wire_fields(forged))

        async def refused() -> bool:
            return any(d.original.get(b"event_id") == forged.event_id.encode() for d in await read_deadletters(services.redis))

        async def running() -> bool:
            view = await load_task(services.pool, "T-gate")
            return view is not None and view.state.value == "running"

        assert await services.wait_until(refused)
        assert await services.wait_until(running)
        on_the_log = [e.event_id for e in await services.events()]
        assert forged.event_id not in on_the_log and all(e.event_id in on_the_log for e in honest)
        assert await services.fetch("SELECT * FROM ledger.task_output WHERE task_id = 'T-gate'") == []
    [dead] = [d for d in await read_deadletters(services.redis) if d.original.get(b"event_id") == forged.event_id.encode()]
    assert (dead.stream, dead.group, dead.reason) == (producer_stream("matcher"), "gate", "invalid")
    assert "task.succeeded is owned by dispatcher; matcher may not write it" in dead.error


def test_the_session_redis_has_a_user_per_service_and_the_gate(fresh_settings: Settings) -> None:
    names = set(load_users(Path(fresh_settings.data_dir)))
    expected = {f"service.{s}" for s in ("intake", "readiness", "matcher", "dispatcher", "ledger", "views", "config", "console")}
    assert expected | {"gate"} <= names
