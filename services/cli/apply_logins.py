"""`cardflow apply-logins`: make every process's Redis user and PostgreSQL role on running servers.

What `cardflow redis-users` / `cardflow pg-roles` print, applied: connected as the Redis admin
(`CARDFLOW_REDIS_URL`) and the database owner (`CARDFLOW_DATABASE_URL`), it waits until both
answer, runs `ACL SETUSER` for each user of `shared.process_logins` (rules of `shared.redis_acl`)
and `ACL SAVE` (the server must have an ACL file, so the users outlive a restart), then
`shared.embedded.pg_users.apply_roles` (the statements of `shared.pg_roles`, idempotent). Each
password comes from its own environment variable (`CARDFLOW_INTAKE_REDIS_PASSWORD`,
`CARDFLOW_INTAKE_POSTGRES_PASSWORD`, ...: `shared.process_logins.password_variable`), so running it
again with the same environment changes nothing, and with a new value re-keys that login. It is the one-shot `setup` container of docker-compose.yml; the only process there that
holds the admin passwords.

It never deletes a user on its own: `agent.*` users the server has that no `--agent` names (a host
taken out of the list) are named in a warning. With `--prune-agents` it deletes them, each through
`services.identity.agents.unenroll_stale_agents` (`agent.unenrolled`, actor `system:apply-logins`,
the `--reason`, written as the console's PostgreSQL role, which owns schema identity); service,
gate and upstream users are never touched.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from services.cli.lang import CliLang, LangOption

if TYPE_CHECKING:
    from services.identity.agents import UnenrolledAgent
    from shared.process_logins import ProcessLogin

console = Console()
errors = Console(stderr=True, soft_wrap=True)

LABELS = {
    CliLang.EN: {"title": "logins applied", "redis_user": "Redis user", "pg_role": "PostgreSQL role",
                 "password": "passwords from", "saved": "Redis ACL file saved: the users outlive a Redis restart",
                 "pruned_title": "agent users deleted (--prune-agents)", "event_id": "agent.unenrolled event",
                 "none_stale": "no agent user to delete: --agent names every agent user Redis has",
                 "stale": "warning: Redis has agent users no --agent names, and they can still log in: {users}."
                          " Run again with --prune-agents (and --reason TEXT) to delete them; each is recorded as agent.unenrolled",
                 "not_applied": "logins not applied:", "original": "",
                 "no_admin": "set CARDFLOW_REDIS_URL (a Redis admin) and CARDFLOW_DATABASE_URL (the database owner)",
                 "no_reason": "--reason is empty: say why the agents not listed lose their Redis users"},
    CliLang.ZH: {"title": "已应用的登录身份", "redis_user": "Redis 用户", "pg_role": "PostgreSQL 角色",
                 "password": "密码来自环境变量", "saved": "Redis ACL 文件已保存：Redis 重启后用户仍保留",
                 "pruned_title": "已删除的代理用户（--prune-agents）", "event_id": "agent.unenrolled 事件",
                 "none_stale": "没有要删除的代理用户：Redis 中的每个代理用户都由 --agent 列出",
                 "stale": "警告：Redis 中有未被任何 --agent 列出的代理用户，它们仍可登录：{users}。"
                          "加上 --prune-agents（及 --reason 说明原因）再运行一次即可删除；每次删除都记录为 agent.unenrolled",
                 "not_applied": "登录身份未应用：", "original": "（原文）",
                 "no_admin": "请设置 CARDFLOW_REDIS_URL（Redis 管理员）和 CARDFLOW_DATABASE_URL（数据库所有者）",
                 "no_reason": "--reason 为空：请说明未列出的代理为何失去其 Redis 用户"},
}  # fmt: skip
PRUNE_REASON = "no longer listed by cardflow apply-logins --agent (--prune-agents)"


class LoginsNotApplied(Exception):
    """A login could not be made; the message names what is missing or refused."""


@dataclass(frozen=True)
class AppliedLogins:
    stale: list[str]  # agent users the server had that no --agent names
    pruned: list[UnenrolledAgent]  # those deleted (--prune-agents), each with its agent.unenrolled event


@dataclass(frozen=True)
class LoginPasswords:
    redis: dict[str, str]  # Redis user -> password
    postgres: dict[str, str]  # service (of shared.pg_roles) -> its role's password


def login_passwords(logins: list[ProcessLogin], env: Mapping[str, str]) -> LoginPasswords:
    """Every login's passwords from `env`; raises `LoginsNotApplied` naming every variable unset or empty."""
    missing = [variable for login in logins for variable in login.password_variables if not env.get(variable)]
    if missing:
        raise LoginsNotApplied(f"set {', '.join(missing)} (one password per process and backend; URL-safe characters)")
    return LoginPasswords(
        redis={login.redis_user.name: env[login.redis_password_variable] for login in logins},
        postgres={login.pg_service: env[login.postgres_password_variable]
                  for login in logins if login.pg_service and login.postgres_password_variable},
    )  # fmt: skip


async def wait_for_backends(redis_url: str, dsn: str, wait_s: float) -> None:
    """Return once Redis and PostgreSQL both answer; raise `LoginsNotApplied` with their errors after `wait_s`."""
    from shared.embedded.health import probe_postgres, probe_redis

    deadline = time.monotonic() + wait_s
    while True:
        results = await asyncio.gather(probe_redis(redis_url), probe_postgres(dsn))
        down = [f"{r.name}: {r.error}" for r in results if not r.ok]
        if not down:
            return
        if time.monotonic() >= deadline:
            raise LoginsNotApplied(f"not reachable after {wait_s:g} s: {'; '.join(down)}")
        await asyncio.sleep(1.0)


async def apply_redis_users(admin_url: str, logins: list[ProcessLogin], passwords: Mapping[str, str]) -> None:
    """ACL SETUSER for every login, then ACL SAVE (refused by a server without an ACL file: an error here)."""
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    admin = Redis.from_url(admin_url)
    try:
        for login in logins:
            user = login.redis_user
            try:
                await admin.execute_command("ACL", "SETUSER", *user.setuser_args(passwords[user.name]))
            except RedisError as refused:
                raise LoginsNotApplied(f"Redis refused ACL SETUSER {user.name}: {refused}") from None
        try:
            await admin.execute_command("ACL", "SAVE")
        except RedisError as refused:
            raise LoginsNotApplied(
                f"Redis refused ACL SAVE ({refused}): start it with an ACL file (--aclfile), or the users vanish at its next restart"
            ) from None
    finally:
        await admin.aclose()


async def apply_logins(redis_url: str, dsn: str, logins: list[ProcessLogin], passwords: LoginPasswords,
                       wait_s: float, prune_reason: str | None = None) -> AppliedLogins:  # fmt: skip
    """Wait for both backends, make the Redis users and the PostgreSQL roles, then find the stale
    agent users and (given `prune_reason`) delete them."""
    import asyncpg

    from shared.embedded.pg_users import apply_roles, role_dsn

    await wait_for_backends(redis_url, dsn, wait_s)
    await apply_redis_users(redis_url, logins, passwords.redis)
    try:
        await apply_roles(dsn, passwords.postgres)
    except asyncpg.PostgresError as refused:
        raise LoginsNotApplied(f"PostgreSQL refused the roles' set-up (run it as the database owner): {refused}") from None
    stale = await find_stale_agent_users(redis_url, logins)
    if prune_reason is None or not stale:
        return AppliedLogins(stale, [])
    console_dsn = role_dsn(dsn, "console", passwords.postgres["console"])  # the owner of schema identity
    return AppliedLogins(stale, await prune_agent_users(console_dsn, redis_url, stale, prune_reason))


async def find_stale_agent_users(admin_url: str, logins: list[ProcessLogin]) -> list[str]:
    """`shared.process_logins.stale_agent_users` of the server's users (ACL USERS)."""
    from redis.asyncio import Redis

    from shared.process_logins import stale_agent_users

    admin = Redis.from_url(admin_url, decode_responses=True)
    try:
        return stale_agent_users(await admin.execute_command("ACL", "USERS"), logins)
    finally:
        await admin.aclose()


async def prune_agent_users(console_dsn: str, admin_url: str, stale: list[str], reason: str) -> list[UnenrolledAgent]:
    import asyncpg

    from services.identity.agents import DeletionRefused, EnrolmentUnavailable, unenroll_stale_agents

    try:
        return await unenroll_stale_agents(console_dsn, admin_url, stale, reason)
    except DeletionRefused as refused:
        raise LoginsNotApplied(f"Redis refused ACL DELUSER to the user of CARDFLOW_REDIS_URL ({refused.refused}); pruning"
                               " stopped there (users deleted before it stay deleted, each with its event)") from None
    except EnrolmentUnavailable as refused:
        raise LoginsNotApplied(f"Redis refused to delete the stale agent users: {refused}") from None
    except (asyncpg.PostgresError, OSError) as refused:
        raise LoginsNotApplied(f"cannot record agent.unenrolled as the console's role, nothing deleted: {refused}") from None


def logins_table(logins: list[ProcessLogin], lang: CliLang) -> Table:
    labels = LABELS[lang]
    table = Table(title=labels["title"])
    for key in ("redis_user", "pg_role", "password"):
        table.add_column(labels[key])
    for login in logins:
        table.add_row(login.redis_user.name, login.pg_role or "-", "\n".join(login.password_variables))
    return table


def register(app: typer.Typer) -> None:
    app.command("apply-logins")(apply_logins_command)


def apply_logins_command(
    agent: Annotated[list[str], typer.Option("--agent", help="also the user of this agent id (repeatable)")] = [],  # noqa: B006
    upstream: Annotated[list[str], typer.Option("--upstream", help="also the user of this upstream system (repeatable)")] = [],  # noqa: B006
    prune_agents: Annotated[bool, typer.Option("--prune-agents", help="delete every agent.* Redis user no --agent names (recorded as agent.unenrolled)")] = False,
    reason: Annotated[str, typer.Option("--reason", help="why, with --prune-agents: recorded in each agent.unenrolled event")] = PRUNE_REASON,
    wait: Annotated[float, typer.Option("--wait", min=0, help="seconds to wait for Redis and PostgreSQL to answer")] = 60.0,
    lang: LangOption = CliLang.EN,
) -> None:
    """Create or update every process's Redis user and PostgreSQL role as their admin (passwords from CARDFLOW_<PROCESS>_{REDIS,POSTGRES}_PASSWORD)."""
    from shared.process_logins import DuplicateLoginError, process_logins
    from shared.redis_acl import UnsafeNameError
    from shared.settings import Settings

    settings, labels = Settings(), LABELS[lang]
    if not settings.redis_url or not settings.database_dsn:
        raise _not_applied(labels["no_admin"], labels)
    if prune_agents and not reason.strip():
        raise _not_applied(labels["no_reason"], labels)
    try:
        logins = process_logins(tuple(agent), tuple(upstream))
        passwords = login_passwords(logins, os.environ)
        applied = asyncio.run(apply_logins(settings.redis_url, settings.database_dsn, logins, passwords, wait,
                                           reason.strip() if prune_agents else None))  # fmt: skip
    except (LoginsNotApplied, DuplicateLoginError, UnsafeNameError) as problem:
        raise _not_applied(f"{problem}{labels['original']}", labels) from None
    console.print(logins_table(logins, lang))
    console.print(LABELS[lang]["saved"])
    print_stale_agents(applied, prune_agents, lang)


def _not_applied(problem: str, labels: dict[str, str]) -> typer.Exit:
    """One line on stderr: the logins were not applied, and why (a problem found below this command in English, marked 原文)."""
    errors.print(f"[red]{labels['not_applied']}[/red] {escape(problem)}")
    return typer.Exit(1)


def print_stale_agents(applied: AppliedLogins, prune_agents: bool, lang: CliLang) -> None:
    """The deleted agent users (--prune-agents), else a warning naming the stale ones."""
    labels = LABELS[lang]
    if not prune_agents:
        if applied.stale:
            errors.print(f"[yellow]{escape(labels['stale'].format(users=', '.join(applied.stale)))}[/yellow]")
        return
    if not applied.pruned:
        console.print(labels["none_stale"])
        return
    table = Table(title=labels["pruned_title"])
    for key in ("redis_user", "event_id"):
        table.add_column(labels[key])
    for gone in applied.pruned:
        table.add_row(gone.redis_user, gone.event_id)
    console.print(table)
