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
    from shared.process_logins import ProcessLogin

console = Console()
errors = Console(stderr=True, soft_wrap=True)

LABELS = {
    CliLang.EN: {"title": "logins applied", "redis_user": "Redis user", "pg_role": "PostgreSQL role",
                 "password": "passwords from", "saved": "Redis ACL file saved: the users outlive a Redis restart"},
    CliLang.ZH: {"title": "已应用的登录身份", "redis_user": "Redis 用户", "pg_role": "PostgreSQL 角色",
                 "password": "密码来自环境变量", "saved": "Redis ACL 文件已保存：Redis 重启后用户仍保留"},
}  # fmt: skip


class LoginsNotApplied(Exception):
    """A login could not be made; the message names what is missing or refused."""


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
                       wait_s: float) -> None:  # fmt: skip
    """Wait for both backends, then make the Redis users and the PostgreSQL roles."""
    import asyncpg

    from shared.embedded.pg_users import apply_roles

    await wait_for_backends(redis_url, dsn, wait_s)
    await apply_redis_users(redis_url, logins, passwords.redis)
    try:
        await apply_roles(dsn, passwords.postgres)
    except asyncpg.PostgresError as refused:
        raise LoginsNotApplied(f"PostgreSQL refused the roles' set-up (run it as the database owner): {refused}") from None


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
    wait: Annotated[float, typer.Option("--wait", min=0, help="seconds to wait for Redis and PostgreSQL to answer")] = 60.0,
    lang: LangOption = CliLang.EN,
) -> None:
    """Create or update every process's Redis user and PostgreSQL role as their admin (passwords from CARDFLOW_<PROCESS>_{REDIS,POSTGRES}_PASSWORD)."""
    from shared.process_logins import DuplicateLoginError, process_logins
    from shared.redis_acl import UnsafeNameError
    from shared.settings import Settings

    settings = Settings()
    try:
        if not settings.redis_url or not settings.database_dsn:
            raise LoginsNotApplied("set CARDFLOW_REDIS_URL (a Redis admin) and CARDFLOW_DATABASE_URL (the database owner)")
        logins = process_logins(tuple(agent), tuple(upstream))
        passwords = login_passwords(logins, os.environ)
        asyncio.run(apply_logins(settings.redis_url, settings.database_dsn, logins, passwords, wait))
    except (LoginsNotApplied, DuplicateLoginError, UnsafeNameError) as problem:
        errors.print(f"[red]logins not applied:[/red] {escape(str(problem))}")
        raise typer.Exit(1) from None
    console.print(logins_table(logins, lang))
    console.print(LABELS[lang]["saved"])
