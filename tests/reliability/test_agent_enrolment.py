"""Enrolling an agent through the API (`POST /v1/agents`, `cardflow enroll`) against the session's
real embedded Valkey: the agent's new user reads its own inbox and is refused another's (NOPERM);
the enrolment is an `agent.enrolled` event with the admin as actor and the reason; a console
without the right to make Redis users says which commands an admin runs instead. Unenrolling
(`DELETE /v1/agents/{id}`, `cardflow unenroll`) deletes the user — its password is refused, its
open connection closed — and drops it from the users file, recorded as `agent.unenrolled`; the
agent's lease then expires and its task is requeued and runs on another agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, ConnectionError, NoPermissionError
from typer.testing import CliRunner

from services.cli.main import app
from services.console.auth import SESSION_COOKIE
from shared.embedded.redis_users import USERS_FILE, load_users
from shared.events import Envelope
from shared.names import REPORTS_STREAM, agent_inbox
from shared.settings import Settings
from tests.helpers.console_server import bearer, console_client, first_admin, issue_token, serving_console
from tests.helpers.redis_users import acl_denials, as_user, reset_acl_log
from tests.helpers.system import RunningSystem, running_system

# 8 H100 GPUs for about 8 s of real time at x600, a checkpoint every real second (tests/e2e/test_agent_loss.py).
LONG_TASK = {"name": "long-finetune", "project": "llm", "priority_class": "core", "gpus": 8, "min_vram_gb": 80,
             "estimate_gpu_hours": 34, "profile": "compute", "checkpoint": {"interval_minutes": 10}}  # fmt: skip


def enrolling(settings: Settings, users_dir: Path | None = None) -> Settings:
    """The console as `cardflow up` runs it on the embedded Redis: its own user, plus the admin URL for
    enrolment (and, given `users_dir`, the users file that keeps enrolled agents across restarts)."""
    users_file = users_dir / USERS_FILE if users_dir else None
    return as_user(settings, "service.console").model_copy(
        update={"agent_enrolment_redis_url": SecretStr(settings.redis_url or ""), "redis_users_file": users_file}
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


async def test_an_unenrolled_agent_is_refused_and_forgotten_and_the_event_says_who_and_why(
    fresh_settings: Settings, tmp_path: Path
) -> None:
    admin = await first_admin(fresh_settings)
    async with console_client(enrolling(fresh_settings, tmp_path), admin) as client:
        enrolled = (await client.post("/v1/agents", json={"agent_id": "gpu-u1", "reason": "rack 3"})).json()
        assert "agent.gpu-u1" in load_users(tmp_path)
        agent = Redis.from_url(enrolled["redis_url"])
        try:
            await agent.xadd(REPORTS_STREAM, {"probe": "before"})  # a live connection, logged in as the agent
            answer = await client.request("DELETE", "/v1/agents/gpu-u1", json={"reason": "host decommissioned"})
            again = await client.request("DELETE", "/v1/agents/gpu-u1", json={"reason": "twice"})
            with pytest.raises((AuthenticationError, ConnectionError), match="(?i)WRONGPASS|NOPERM|auth|closed"):
                await agent.xadd(REPORTS_STREAM, {"probe": "after"})  # its connection was closed; logging in again fails
        finally:
            await agent.aclose()
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["agent_id"], body["redis_user"], body["saved"]) == ("gpu-u1", "agent.gpu-u1", True)
    fresh = Redis.from_url(enrolled["redis_url"])
    try:
        with pytest.raises(AuthenticationError, match="(?i)WRONGPASS|invalid username-password"):
            await fresh.ping()
    finally:
        await fresh.aclose()
    assert "agent.gpu-u1" not in load_users(tmp_path)  # the next start's ACL file will not have it
    admin_redis = Redis.from_url(fresh_settings.redis_url or "")
    try:
        assert await admin_redis.execute_command("ACL", "GETUSER", "agent.gpu-u1") is None
    finally:
        await admin_redis.aclose()

    assert again.status_code == 404 and "gpu-u1" in again.json()["detail"]
    events = await _identity_outbox(fresh_settings, "agent.unenrolled")
    assert [(e["event_id"], e["actor"], e["subject"], e["data"]) for e in events] == [
        (body["event_id"], "user:root", "agent/gpu-u1",
         {"agent_id": "gpu-u1", "redis_user": "agent.gpu-u1", "reason": "host decommissioned"})
    ]  # fmt: skip
    assert enrolled["password"] not in json.dumps(events)


async def test_a_deletion_that_went_unrecorded_is_recorded_when_asked_again_and_the_register_says_who(
    fresh_settings: Settings,
) -> None:
    """Redis and PostgreSQL share no transaction: a Redis user deleted while its transaction failed to
    commit (or deleted by hand, as the manual steps say) left no record, and asking again answered
    404. The register of enrolled agents now says it was enrolled, so the unenrolment is recorded."""
    admin = await first_admin(fresh_settings)
    operator = await issue_token(fresh_settings, admin, "planner", "operator")
    async with console_client(enrolling(fresh_settings), admin) as client:
        for agent_id in ("gpu-r1", "gpu-r2"):
            assert (await client.post("/v1/agents", json={"agent_id": agent_id, "reason": "rack 6"})).status_code == 201
        by_hand = Redis.from_url(fresh_settings.redis_url or "")
        try:
            assert await by_hand.execute_command("ACL", "DELUSER", "agent.gpu-r1") == 1
        finally:
            await by_hand.aclose()
        recorded = await client.request("DELETE", "/v1/agents/gpu-r1", json={"reason": "deleted by hand on Monday"})
        again = await client.request("DELETE", "/v1/agents/gpu-r1", json={"reason": "twice"})
        register = (await client.get("/v1/agents")).json()
        not_admin = await client.get("/v1/agents", headers=bearer(operator))

    assert recorded.status_code == 200, recorded.text
    assert recorded.json()["already_deleted"] is True
    assert again.status_code == 404
    events = await _identity_outbox(fresh_settings, "agent.unenrolled")
    assert [(e["actor"], e["data"]["reason"]) for e in events] == [("user:root", "deleted by hand on Monday")]
    rows = {row["agent_id"]: row for row in register}
    assert [row["agent_id"] for row in register] == ["gpu-r2", "gpu-r1"]  # enrolled ones first
    assert (rows["gpu-r2"]["enrolled_by"], rows["gpu-r2"]["enrol_reason"], rows["gpu-r2"]["unenrolled_at"]) == (
        "user:root", "rack 6", None)  # fmt: skip
    assert (rows["gpu-r1"]["unenrolled_by"], rows["gpu-r1"]["unenrol_reason"]) == ("user:root", "deleted by hand on Monday")
    assert not_admin.status_code == 403


async def test_the_fleet_page_shows_admins_the_register_of_enrolled_agents(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    operator = await issue_token(fresh_settings, admin, "planner", "operator")
    async with console_client(enrolling(fresh_settings), admin) as client:
        for agent_id in ("gpu-p1", "gpu-p2"):
            assert (await client.post("/v1/agents", json={"agent_id": agent_id, "reason": "rack 7"})).status_code == 201
        assert (await client.request("DELETE", "/v1/agents/gpu-p2", json={"reason": "sold"})).status_code == 200
        english = (await client.get("/fleet")).text
        chinese = (await client.get("/fleet?lang=zh")).text
        client.cookies.set(SESSION_COOKIE, operator)  # from here on the pages' session is the operator's
        as_operator = (await client.get("/fleet?lang=en", headers=bearer(operator))).text

    for page, title, enrolled in ((english, "Enrolled agents", "enrolled"), (chinese, "已登记的代理", "已登记")):
        assert title in page
        row_p1 = page[page.index('id="agent-gpu-p1"'):].split("</tr>")[0]
        row_p2 = page[page.index('id="agent-gpu-p2"'):].split("</tr>")[0]
        assert "agent.gpu-p1" in row_p1 and "user:root" in row_p1 and "rack 7" in row_p1 and enrolled in row_p1
        assert "rack 7" in row_p2 and "sold" in row_p2 and enrolled not in row_p2
    assert "Fleet" in as_operator and "Enrolled agents" not in as_operator  # the register is for admins


FAIL_THE_RECORD = """
CREATE FUNCTION identity.fail_the_record() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN RAISE EXCEPTION 'the record of the unenrolment fails (test)'; END $$;
CREATE TRIGGER fail_the_record BEFORE UPDATE ON identity.agents FOR EACH ROW
    WHEN (NEW.unenrolled_at IS NOT NULL) EXECUTE FUNCTION identity.fail_the_record();
"""


async def test_an_unenrolment_whose_record_failed_after_the_deletion_is_recorded_later_as_its_asker(
    fresh_settings: Settings,
) -> None:
    """Step 3 of services.identity.agents fails after the Redis user was deleted (a trigger makes the
    transaction fail, as a lost database connection would): the request row survives, and the
    console's next listing records the unenrolment with the admin who asked and the reason; a request
    whose user still exists (the console died before deleting) is dropped, nothing recorded."""
    import asyncpg

    admin = await first_admin(fresh_settings)
    owner = await asyncpg.connect(fresh_settings.database_dsn)
    try:
        async with console_client(enrolling(fresh_settings), admin) as client:
            for agent_id in ("gpu-f1", "gpu-f2"):
                assert (await client.post("/v1/agents", json={"agent_id": agent_id, "reason": "rack 9"})).status_code == 201
            await owner.execute(FAIL_THE_RECORD)
            with pytest.raises(asyncpg.RaiseError, match="fails"):  # the in-process client re-raises the server's error
                await client.request("DELETE", "/v1/agents/gpu-f1", json={"reason": "disk failed"})
            await owner.execute("DROP TRIGGER fail_the_record ON identity.agents; DROP FUNCTION identity.fail_the_record()")
            events_after_failure = await _identity_outbox(fresh_settings, "agent.unenrolled")
            left = [dict(r) for r in await owner.fetch("SELECT agent_id, requested_by, reason FROM identity.unenrol_requests")]
            await owner.execute("INSERT INTO identity.unenrol_requests VALUES ('gpu-f2', now(), 'user:root', 'never deleted')")
            fresh_listing = (await client.get("/v1/agents")).json()  # requests under a minute old may be in flight
            await owner.execute("UPDATE identity.unenrol_requests SET requested_at = now() - interval '2 minutes'")
            listing = (await client.get("/v1/agents")).json()
        remaining = await owner.fetch("SELECT agent_id FROM identity.unenrol_requests")
    finally:
        await owner.close()

    admin_redis = Redis.from_url(fresh_settings.redis_url or "")
    try:
        assert await admin_redis.execute_command("ACL", "GETUSER", "agent.gpu-f1") is None  # deleted in step 2
        assert await admin_redis.execute_command("ACL", "GETUSER", "agent.gpu-f2") is not None
    finally:
        await admin_redis.aclose()
    assert events_after_failure == [] and left == [{"agent_id": "gpu-f1", "requested_by": "user:root", "reason": "disk failed"}]
    assert all(row["unenrolled_at"] is None for row in fresh_listing)
    rows = {row["agent_id"]: row for row in listing}
    assert (rows["gpu-f1"]["unenrolled_by"], rows["gpu-f1"]["unenrol_reason"]) == ("user:root", "disk failed")
    assert rows["gpu-f2"]["unenrolled_at"] is None  # its user is still there: the stale request was dropped
    events = await _identity_outbox(fresh_settings, "agent.unenrolled")
    assert [(e["actor"], e["subject"], e["data"]["reason"]) for e in events] == [("user:root", "agent/gpu-f1", "disk failed")]
    assert remaining == []


async def test_unenrolling_refuses_a_non_admin_an_unknown_agent_a_missing_reason_and_a_console_without_the_right(
    fresh_settings: Settings,
) -> None:
    admin = await first_admin(fresh_settings)
    operator = await issue_token(fresh_settings, admin, "planner", "operator")
    async with console_client(enrolling(fresh_settings), admin) as client:
        await client.post("/v1/agents", json={"agent_id": "gpu-u2", "reason": "rack 4"})
        not_admin = await client.request("DELETE", "/v1/agents/gpu-u2", json={"reason": "x"}, headers=bearer(operator))
        unknown = await client.request("DELETE", "/v1/agents/gpu-nobody", json={"reason": "x"})
        no_body = await client.request("DELETE", "/v1/agents/gpu-u2")
        empty_reason = await client.request("DELETE", "/v1/agents/gpu-u2", json={"reason": ""})
        bad_id = await client.request("DELETE", "/v1/agents/a*b", json={"reason": "x"})
    async with console_client(as_user(fresh_settings, "service.console"), admin) as client:
        cannot = await client.request("DELETE", "/v1/agents/gpu-u2", json={"reason": "x"})

    assert not_admin.status_code == 403 and "admin" in not_admin.json()["detail"]
    assert unknown.status_code == 404 and "'gpu-nobody'" in unknown.json()["detail"]
    assert no_body.status_code == 422 and [e["loc"] for e in no_body.json()["detail"]] == [["body"]]
    assert empty_reason.status_code == 422 and [e["loc"] for e in empty_reason.json()["detail"]] == [["body", "reason"]]
    assert bad_id.status_code == 422 and bad_id.json()["detail"][0]["loc"] == ["path", "agent_id"]
    assert cannot.status_code == 409 and "ACL DELUSER agent.gpu-u2" in cannot.json()["detail"]
    assert await _identity_outbox(fresh_settings, "agent.unenrolled") == []  # nothing deleted, nothing recorded
    still = Redis.from_url(fresh_settings.redis_url or "")
    try:
        assert await still.execute_command("ACL", "GETUSER", "agent.gpu-u2") is not None
    finally:
        await still.aclose()


async def test_cardflow_unenroll_through_a_served_console(fresh_settings: Settings) -> None:
    admin = await first_admin(fresh_settings)
    runner = CliRunner()
    with serving_console(enrolling(fresh_settings)) as url:
        env = {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": admin, "COLUMNS": "200"}
        for agent_id in ("gpu-u3", "gpu-u4", "gpu-u5", "gpu-u6"):
            assert runner.invoke(app, ["enroll", agent_id, "--reason", "rack 5"], env=env).exit_code == 0
        with SyncRedis.from_url(fresh_settings.redis_url or "") as by_hand:
            by_hand.execute_command("ACL", "DELUSER", "agent.gpu-u6")
        record_only = runner.invoke(app, ["unenroll", "gpu-u6", "--reason", "已手工删除", "--lang", "zh"], env=env)
        english = runner.invoke(app, ["unenroll", "gpu-u3", "--reason", "retired"], env=env)
        chinese = runner.invoke(app, ["unenroll", "gpu-u4", "--reason", "主机退役", "--lang", "zh"], env=env)
        as_json = runner.invoke(app, ["unenroll", "gpu-u5", "--reason", "retired", "--json"], env=env)
        unknown = runner.invoke(app, ["unenroll", "gpu-u3", "--reason", "again"], env=env)
        no_reason = runner.invoke(app, ["unenroll", "gpu-u3"], env=env)
    assert english.exit_code == 0, english.output
    assert "agent.gpu-u3" in english.output and "password is refused" in english.output
    assert chinese.exit_code == 0 and "已删除的 Redis 用户" in chinese.output and "密码将被拒绝" in chinese.output
    assert json.loads(as_json.stdout)["redis_user"] == "agent.gpu-u5"
    assert unknown.exit_code != 0 and "'gpu-u3'" in unknown.output and "HTTP 404" in unknown.output
    assert no_reason.exit_code != 0 and "--reason" in no_reason.output
    assert record_only.exit_code == 0 and "本次只补记了注销记录" in record_only.output, record_only.output
    events = await _identity_outbox(fresh_settings, "agent.unenrolled")
    assert [(e["data"]["agent_id"], e["data"]["reason"]) for e in events] == [
        ("gpu-u6", "已手工删除"), ("gpu-u3", "retired"), ("gpu-u4", "主机退役"), ("gpu-u5", "retired")
    ]


async def test_an_unenrolled_agents_lease_expires_and_its_task_runs_elsewhere(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path]
) -> None:
    """What docs/running.md promises: unenrolling ends no lease; the agent's reports are refused, so
    its lease expires, the task is requeued from its last checkpoint and the node is lost."""
    admin = await first_admin(fresh_settings)
    async with running_system(fresh_settings, data_dir_factory()) as system:
        # the first agent runs at half the speed (the run takes twice as long there), so even a loaded machine unenrols
        # it long before the run could end there; the next one resumes from the checkpoint at full speed
        system.start_agent("h100-gone", "H100x8", time_scale=300)
        await system.submit([LONG_TASK])
        grant = await system.wait_for(lambda s: s.of_type("lease.granted"), what="the first lease")
        first = grant[0].data
        await system.wait_for(lambda s: _of_task(s, "task.checkpointed", first.task_id), what="a checkpoint")
        async with console_client(enrolling(fresh_settings, system.users_dir), admin) as client:
            answer = await client.request("DELETE", "/v1/agents/h100-gone", json={"reason": "host stolen"})
        assert answer.status_code == 200, answer.text
        system.start_agent("h100-next", "H100x8", time_scale=600)

        requeued = await system.wait_for(lambda s: _of_task(s, "task.requeued", first.task_id), what="the requeue")
        lost = await system.wait_for(lambda s: [e for e in s.of_type("node.lost") if e.data.agent_id == "h100-gone"],
                                     what="the unenrolled node to be lost")  # fmt: skip
        await system.wait_for(lambda s: s.views[first.task_id].is_terminal, timeout=90, what="the task to end")
        system.supervisor.stop_child("agent-h100-gone")  # the admin's part on the host; then no more refusals
        refused = await acl_denials(system.redis)
        await reset_acl_log(system.redis)  # these refusals are the point: the system's own check must not see them

    heard = [e.data.checkpoint_uri for e in _of_task(system, "task.checkpointed", first.task_id) if e.data.lease_id == first.lease_id]
    (expired,) = [e for e in system.of_type("lease.expired") if e.data.lease_id == first.lease_id]
    assert [(r.data.lease_id, r.data.reason, r.data.resume_from) for r in requeued[:1]] == [
        (first.lease_id, "lease_expired", heard[-1])
    ]
    assert expired.data.task_id == first.task_id and lost[0].data.agent_id == "h100-gone"
    (succeeded,) = _of_task(system, "task.succeeded", first.task_id)
    assert [e.data.agent_id for e in system.of_type("lease.granted") if e.data.lease_id == succeeded.data.lease_id] == ["h100-next"]
    assert refused and {(entry["reason"], entry["username"]) for entry in refused} == {("auth", "agent.h100-gone")}


def _of_task(system: RunningSystem, event_type: str, task_id: str) -> list[Envelope]:
    return [e for e in system.of_type(event_type) if e.data.task_id == task_id]


async def _identity_outbox(settings: Settings, event_type: str) -> list[dict[str, object]]:
    import asyncpg

    conn = await asyncpg.connect(settings.database_dsn)
    try:
        rows = await conn.fetch("SELECT body FROM identity.outbox ORDER BY position")
    finally:
        await conn.close()
    bodies = [json.loads(row["body"]) if isinstance(row["body"], str) else dict(row["body"]) for row in rows]
    return [body for body in bodies if body["type"] == event_type]
