"""Enrolling an agent through the API (`POST /v1/agents`, `cardflow enroll`) against the session's
real embedded Valkey: the agent's new user reads its own inbox and is refused another's (NOPERM);
the enrolment is an `agent.enrolled` event with the admin as actor and the reason; a console
without the right to make Redis users says which commands an admin runs instead."""

from __future__ import annotations

import json

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError
from typer.testing import CliRunner

from services.cli.main import app
from shared.names import REPORTS_STREAM, agent_inbox
from shared.settings import Settings
from tests.helpers.console_server import bearer, console_client, first_admin, issue_token, serving_console
from tests.helpers.redis_users import as_user


def enrolling(settings: Settings) -> Settings:
    """The console as `cardflow up` runs it on the embedded Redis: its own user, plus the admin URL for enrolment."""
    return as_user(settings, "service.console").model_copy(
        update={"agent_enrolment_redis_url": SecretStr(settings.redis_url or "")}
    )


async def test_an_enrolled_agent_reads_its_own_inbox_and_not_anothers(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    async with console_client(enrolling(fresh_settings), admin) as client:
        answer = await client.post("/v1/agents", json={"agent_id": "gpu-a1", "reason": "new H100 host in rack 7"})
    assert answer.status_code == 201, answer.text
    enrolled = answer.json()
    assert enrolled["redis_user"] == "agent.gpu-a1" and enrolled["password"] in enrolled["redis_url"]

    agent = Redis.from_url(enrolled["redis_url"])
    try:
        await agent.xgroup_create(agent_inbox("gpu-a1"), "agent", id="0", mkstream=True)
        assert await agent.xreadgroup("agent", "gpu-a1", {agent_inbox("gpu-a1"): ">"}, count=1) == []
        await agent.xadd(REPORTS_STREAM, {"probe": "1"})
        with pytest.raises(NoPermissionError):
            await agent.xreadgroup("agent", "gpu-a1", {agent_inbox("gpu-b2"): ">"}, count=1)
        with pytest.raises(NoPermissionError):
            await agent.xrange(agent_inbox("gpu-b2"))
    finally:
        await agent.aclose()

    events = await _identity_outbox(fresh_settings, "agent.enrolled")
    assert [(e["actor"], e["data"]["agent_id"], e["data"]["reason"]) for e in events] == [
        ("user:root", "gpu-a1", "new H100 host in rack 7")
    ]
    assert enrolled["password"] not in json.dumps(events)


async def test_enrolling_again_makes_a_new_password_and_the_old_one_stops_working(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    async with console_client(enrolling(fresh_settings), admin) as client:
        first = (await client.post("/v1/agents", json={"agent_id": "gpu-c3", "reason": "first"})).json()
        second = (await client.post("/v1/agents", json={"agent_id": "gpu-c3", "reason": "key leaked"})).json()
    assert first["password"] != second["password"]
    for url, works in ((first["redis_url"], False), (second["redis_url"], True)):
        client = Redis.from_url(url)
        try:
            if works:
                await client.ping()
            else:
                with pytest.raises(Exception, match="(?i)auth|password|WRONGPASS"):
                    await client.ping()
        finally:
            await client.aclose()


async def test_a_console_without_the_right_says_which_commands_to_run(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    operator = await issue_token(fresh_settings, admin, "planner", "operator")
    async with console_client(as_user(fresh_settings, "service.console"), admin) as client:
        refused = await client.post("/v1/agents", json={"agent_id": "gpu-d4", "reason": "x"})
        not_admin = await client.post("/v1/agents", json={"agent_id": "gpu-d4", "reason": "x"}, headers=bearer(operator))
        bad_id = await client.post("/v1/agents", json={"agent_id": "../etc", "reason": "x"})
    assert refused.status_code == 409
    assert "cardflow redis-users --agents-only --agent gpu-d4" in refused.json()["detail"]
    assert not_admin.status_code == 403 and bad_id.status_code == 422
    assert await _identity_outbox(fresh_settings, "agent.enrolled") == []  # nothing made, nothing recorded


async def test_cardflow_enroll_through_a_served_console(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    runner = CliRunner()
    with serving_console(enrolling(fresh_settings)) as url:
        env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": admin, "COLUMNS": "200"}
        english = runner.invoke(app, ["enroll", "gpu-e5", "--reason", "rack 9"], env=env)
        chinese = runner.invoke(app, ["enroll", "gpu-e5", "--reason", "换新密码", "--lang", "zh"], env=env)
        as_json = runner.invoke(app, ["enroll", "gpu-e6", "--reason", "rack 9", "--json"], env=env)
    assert english.exit_code == 0, english.output
    assert "agent.gpu-e5" in english.output and "shown only now" in english.output
    assert chinese.exit_code == 0 and "密码仅显示这一次" in chinese.output and "Redis 用户" in chinese.output
    assert json.loads(as_json.stdout)["redis_user"] == "agent.gpu-e6"


async def _identity_outbox(settings: Settings, event_type: str) -> list[dict[str, object]]:
    import asyncpg

    conn = await asyncpg.connect(settings.database_dsn)
    try:
        rows = await conn.fetch("SELECT body FROM identity.outbox ORDER BY position")
    finally:
        await conn.close()
    bodies = [json.loads(row["body"]) if isinstance(row["body"], str) else dict(row["body"]) for row in rows]
    return [body for body in bodies if body["type"] == event_type]
