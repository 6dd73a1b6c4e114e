"""`cardflow apply-logins` (the set-up container of docker-compose.yml) against the session's real
embedded Valkey and PostgreSQL: it makes every process's Redis user with the rules of
shared.redis_acl and saves them in the server's ACL file, and every service role of shared.pg_roles
in the database it is given; without a password variable it names it and makes nothing. An agent
user no `--agent` names is named in a warning, and deleted with `--prune-agents` (recorded as
`agent.unenrolled`); service and upstream users are never touched.

The services' passwords passed are the ones the session's servers already have (so the other tests
keep logging in); the agent is new, so its user exists only if the command made it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, NoPermissionError

from shared.embedded.pg_users import load_or_create_role_passwords, role_dsn
from shared.embedded.redis_users import load_users
from shared.events import new_event_id
from shared.names import REPORTS_STREAM, agent_inbox
from shared.pg_roles import SERVICE_ROLES, role_name
from shared.process_logins import process_logins
from shared.redis_acl import RedisUser, agent_user, upstream_user, user_url
from shared.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def run_apply_logins(settings: Settings, passwords: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_REDIS_URL": settings.redis_url or "", "CARDFLOW_DATABASE_URL": settings.database_dsn or ""}
    env |= passwords
    return subprocess.run([sys.executable, "-m", "services.cli.main", "apply-logins", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


def session_passwords(settings: Settings, agent: str, agent_password: str) -> dict[str, str]:
    """Every login's variable -> the password the session's servers have for it (the agent's: new)."""
    redis_users = load_users(Path(settings.data_dir))
    roles = load_or_create_role_passwords(Path(settings.data_dir))
    passwords: dict[str, str] = {}
    for login in process_logins((agent,)):
        stored = redis_users.get(login.redis_user.name)
        passwords[login.redis_password_variable] = stored.password if stored else agent_password
        if login.pg_service and login.postgres_password_variable:
            passwords[login.postgres_password_variable] = roles[login.pg_service]
    return passwords


async def drop_user(settings: Settings, name: str) -> None:
    admin = Redis.from_url(settings.redis_url or "")
    try:
        await admin.execute_command("ACL", "DELUSER", name)
        await admin.execute_command("ACL", "SAVE")
    finally:
        await admin.aclose()


async def make_user(settings: Settings, user: RedisUser, password: str) -> None:
    admin = Redis.from_url(settings.redis_url or "")
    try:
        await admin.execute_command("ACL", "SETUSER", *user.setuser_args(password))
    finally:
        await admin.aclose()


async def redis_user_names(settings: Settings) -> set[str]:
    admin = Redis.from_url(settings.redis_url or "", decode_responses=True)
    try:
        return set(await admin.execute_command("ACL", "USERS"))
    finally:
        await admin.aclose()


async def unenrolled_events(settings: Settings) -> list[dict[str, object]]:
    conn = await asyncpg.connect(settings.database_dsn)
    try:
        rows = await conn.fetch("SELECT body FROM identity.outbox ORDER BY position")
    except asyncpg.UndefinedTableError:
        return []
    finally:
        await conn.close()
    bodies = [json.loads(row["body"]) if isinstance(row["body"], str) else dict(row["body"]) for row in rows]
    return [body for body in bodies if body["type"] == "agent.unenrolled"]


async def test_apply_logins_makes_every_user_and_role_and_saves_the_acl_file(fresh_settings: Settings) -> None:
    agent, agent_password = f"compose-{new_event_id()[-8:].lower()}", secrets.token_urlsafe(16)
    passwords = session_passwords(fresh_settings, agent, agent_password)
    try:
        done = run_apply_logins(fresh_settings, passwords, "--agent", agent, "--wait", "10")
        assert done.returncode == 0, done.stderr
        assert f"agent.{agent}" in done.stdout and "cardflow_intake" in done.stdout

        client = Redis.from_url(user_url(fresh_settings.redis_url or "", f"agent.{agent}", agent_password))
        try:
            await client.xadd(REPORTS_STREAM, {"probe": "1"})
            with pytest.raises(NoPermissionError):  # the rules of shared.redis_acl.agent_user: its own inbox only
                await client.xrange(agent_inbox("someone-else"))
        finally:
            await client.aclose()
        acl_file = Path(fresh_settings.data_dir) / "redis" / "users.acl"
        assert any(line.startswith(f"user agent.{agent} ") for line in acl_file.read_text().splitlines())
    finally:
        await drop_user(fresh_settings, f"agent.{agent}")

    dsn = fresh_settings.database_dsn or ""
    owners = {role.service: role.owns for role in SERVICE_ROLES.values()}
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT nspname, nspowner::regrole::text AS owner FROM pg_namespace")
    finally:
        await conn.close()
    found = {row["nspname"]: row["owner"] for row in rows}
    assert {schema: found.get(schema) for service, schemas in owners.items() for schema in schemas} == {
        schema: role_name(service) for service, schemas in owners.items() for schema in schemas
    }
    roles = load_or_create_role_passwords(Path(fresh_settings.data_dir))
    intake = await asyncpg.connect(role_dsn(dsn, "intake", roles["intake"]))
    try:
        assert await intake.fetchval("SELECT current_user") == "cardflow_intake"
        assert urlsplit(dsn).path.lstrip("/") == await intake.fetchval("SELECT current_database()")
    finally:
        await intake.close()


async def test_apply_logins_names_every_missing_password_and_makes_nothing(fresh_settings: Settings) -> None:
    agent = f"compose-{new_event_id()[-8:].lower()}"
    passwords = session_passwords(fresh_settings, agent, secrets.token_urlsafe(16))
    variable = f"CARDFLOW_AGENT_{agent.upper().replace('-', '_')}_REDIS_PASSWORD"
    del passwords[variable], passwords["CARDFLOW_LEDGER_POSTGRES_PASSWORD"]

    done = run_apply_logins(fresh_settings, passwords, "--agent", agent, "--wait", "10")

    assert done.returncode == 1
    assert "CARDFLOW_LEDGER_POSTGRES_PASSWORD" in done.stderr and variable in done.stderr
    admin = Redis.from_url(fresh_settings.redis_url or "")
    try:
        assert await admin.execute_command("ACL", "GETUSER", f"agent.{agent}") is None
    finally:
        await admin.aclose()


def test_apply_logins_says_which_backend_did_not_answer() -> None:
    settings = Settings(redis_url="redis://:x@127.0.0.1:1/0", database_url="postgresql://u:x@127.0.0.1:1/cardflow")

    done = run_apply_logins(settings, {}, "--wait", "0")

    assert done.returncode == 1
    assert "set CARDFLOW_" in done.stderr  # the passwords are checked before anything is reached
    passwords = {variable: "x" for login in process_logins() for variable in login.password_variables}
    done = run_apply_logins(settings, passwords, "--wait", "0")
    assert done.returncode == 1 and "not reachable after 0 s" in done.stderr and "redis:" in done.stderr
    in_chinese = run_apply_logins(settings, passwords, "--wait", "0", "--lang", "zh")
    assert in_chinese.returncode == 1 and in_chinese.stderr.startswith("登录身份未应用：") and "（原文）" in in_chinese.stderr
    no_admin = run_apply_logins(Settings(redis_url="", database_url=""), {}, "--lang", "zh")
    assert no_admin.returncode == 1 and "请设置 CARDFLOW_REDIS_URL（Redis 管理员）" in no_admin.stderr, no_admin.stderr


async def test_prune_agents_deletes_agent_users_not_listed_and_keeps_the_listed_service_and_upstream_users(
    fresh_settings: Settings,
) -> None:
    suffix = new_event_id()[-8:].lower()
    keep, stale, upstream = f"keep-{suffix}", f"stale-{suffix}", f"pipeline-{suffix}"
    keep_password, stale_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    await make_user(fresh_settings, agent_user(stale), stale_password)
    await make_user(fresh_settings, upstream_user(upstream), secrets.token_urlsafe(16))
    try:
        done = run_apply_logins(fresh_settings, session_passwords(fresh_settings, keep, keep_password), "--agent", keep,
                                "--prune-agents", "--reason", "rack 9 retired", "--wait", "10")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "agent users deleted" in done.stdout and f"agent.{stale}" in done.stdout

        users = await redis_user_names(fresh_settings)
        assert f"agent.{stale}" not in users and f"agent.{keep}" in users and f"upstream.{upstream}" in users
        assert {login.redis_user.name for login in process_logins()} <= users  # every service user and the gate
        assert [name for name in users if name.startswith("agent.")] == [f"agent.{keep}"]
        refused = Redis.from_url(user_url(fresh_settings.redis_url or "", f"agent.{stale}", stale_password))
        kept = Redis.from_url(user_url(fresh_settings.redis_url or "", f"agent.{keep}", keep_password))
        try:
            with pytest.raises(AuthenticationError, match="(?i)WRONGPASS|invalid username-password"):
                await refused.ping()
            await kept.xadd(REPORTS_STREAM, {"probe": "1"})
        finally:
            await refused.aclose()
            await kept.aclose()
        acl_file = Path(fresh_settings.data_dir) / "redis" / "users.acl"
        assert not any(line.startswith(f"user agent.{stale} ") for line in acl_file.read_text().splitlines())

        events = [e for e in await unenrolled_events(fresh_settings) if e["data"]["agent_id"] == stale]
        assert [(e["actor"], e["data"]["redis_user"], e["data"]["reason"]) for e in events] == [
            ("system:apply-logins", f"agent.{stale}", "rack 9 retired")
        ]
        assert stale_password not in json.dumps(events)
        again = run_apply_logins(fresh_settings, session_passwords(fresh_settings, keep, keep_password), "--agent", keep,
                                 "--prune-agents", "--wait", "10")  # fmt: skip
        assert again.returncode == 0 and "no agent user to delete" in again.stdout, again.stderr
    finally:
        await drop_user(fresh_settings, f"agent.{keep}")
        await drop_user(fresh_settings, f"upstream.{upstream}")


async def test_without_prune_agents_a_warning_names_the_stale_agent_users_and_nothing_is_deleted(
    fresh_settings: Settings,
) -> None:
    suffix = new_event_id()[-8:].lower()
    keep, stale = f"keep-{suffix}", f"stale-{suffix}"
    await make_user(fresh_settings, agent_user(stale), secrets.token_urlsafe(16))
    passwords = session_passwords(fresh_settings, keep, secrets.token_urlsafe(16))
    try:
        english = run_apply_logins(fresh_settings, passwords, "--agent", keep, "--wait", "10")
        chinese = run_apply_logins(fresh_settings, passwords, "--agent", keep, "--wait", "10", "--lang", "zh")
        assert english.returncode == 0 and chinese.returncode == 0, english.stderr + chinese.stderr
        assert f"agent.{stale}" in english.stderr and "--prune-agents" in english.stderr
        assert f"agent.{keep}" not in english.stderr
        assert "警告" in chinese.stderr and f"agent.{stale}" in chinese.stderr
        assert f"agent.{stale}" in await redis_user_names(fresh_settings)
        assert await unenrolled_events(fresh_settings) == []
    finally:
        await drop_user(fresh_settings, f"agent.{stale}")
        await drop_user(fresh_settings, f"agent.{keep}")


async def test_prune_agents_refused_acl_deluser_says_so_and_keeps_the_user(fresh_settings: Settings) -> None:
    """An admin URL whose user may do all but ACL DELUSER: apply-logins names the refusal, not a console setting."""
    suffix = new_event_id()[-8:].lower()
    keep, stale, limited = f"keep-{suffix}", f"stale-{suffix}", f"limited-admin-{suffix}"
    limited_password = secrets.token_urlsafe(16)
    await make_user(fresh_settings, agent_user(stale), secrets.token_urlsafe(16))
    admin = Redis.from_url(fresh_settings.redis_url or "")
    try:
        await admin.execute_command("ACL", "SETUSER", limited, "on", f">{limited_password}", "~*", "&*", "+@all", "-acl|deluser")
    finally:
        await admin.aclose()
    limited_settings = fresh_settings.model_copy(update={"redis_url": user_url(fresh_settings.redis_url or "", limited, limited_password)})
    try:
        done = run_apply_logins(limited_settings, session_passwords(fresh_settings, keep, secrets.token_urlsafe(16)),
                                "--agent", keep, "--prune-agents", "--wait", "10")  # fmt: skip
        assert done.returncode != 0
        assert "Redis refused ACL DELUSER to the user of CARDFLOW_REDIS_URL" in done.stderr, done.stderr
        assert "CARDFLOW_AGENT_ENROLMENT_REDIS_URL" not in done.stderr and "this console" not in done.stderr
        assert f"agent.{stale}" in await redis_user_names(fresh_settings)
    finally:
        await drop_user(fresh_settings, f"agent.{stale}")
        await drop_user(fresh_settings, f"agent.{keep}")
        await drop_user(fresh_settings, limited)
