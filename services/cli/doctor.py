"""`cardflow doctor`: cardflow's version, whether Redis, PostgreSQL and S3 answer, retention, config in force.

The backends come from the environment (`CARDFLOW_*`), else from the instance `cardflow up` runs on the
data dir. Every check prints a table; a backend that is not configured or does not answer is named with
where its settings came from, and the command exits 1 (the compose and Kubernetes healthcheck).
`--lang zh` (or `CARDFLOW_LANG=zh`) says the tables and findings in Chinese; a backend's own error text
stays as it came.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from services.cli.backends import DataDirOption, console, data_dir_of, errors
from services.cli.lang import CliLang, LangOption

if TYPE_CHECKING:  # the backends' code is imported inside the command: `cardflow --help` starts fast
    from shared.embedded import BackendHealth, Endpoints
    from shared.settings import Settings


def register(app: typer.Typer) -> None:
    """Attach `doctor`."""
    app.command("doctor")(doctor)


@dataclass(frozen=True)
class Target:
    """One backend to check: where its settings came from and how to probe it."""

    name: str
    source: str
    probe: Callable[[], Awaitable[BackendHealth]] | None
    url: str | None = None  # Redis URL / PostgreSQL DSN, for the retention tables


DOCTOR_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "version": "cardflow {version} (Python {python}; dependencies from requirements.lock)",
        "title": "cardflow doctor", "backend": "backend", "source": "source", "url": "url", "reachable": "reachable",
        "detail": "version / error", "not configured": "not configured", "yes": "yes", "no": "no", "env": "env",
        "instance": "instance {where}", "not_ready": "not ready:", "all_reachable": "all backends reachable",
        "unconfigured": "{name} not configured (set {variable} or run `cardflow up`)",
        "unreachable": "{name} unreachable at {url} ({error})",
        "config_title": "configuration in force (cardflow config history NAME)", "document": "document", "since": "since",
        "version_column": "version",
        "by": "by", "reason": "reason", "no_config_schema": "this login may not read the config schema (its role does not use it)",
        "no_config_store": "no config store yet: the config service has not run",
        "streams_title": "streams (kept {keep} after every consumer group read them)", "stream": "stream",
        "entries": "entries", "groups": "groups", "oldest entry": "oldest entry", "trim": "may be trimmed below",
        "streams_hidden": "this login may not read every stream (its Redis user reads only its own)",
        "schemas_title": "outboxes (kept {outbox} once archived) and inboxes (kept {inbox})", "schema": "schema",
        "outbox rows": "outbox rows", "unpublished": "not yet published", "inbox rows": "inbox rows",
        "age": "{entry} ({hours:.1f} h ago)",
    },
    CliLang.ZH: {
        "version": "cardflow {version}（Python {python}；依赖版本来自 requirements.lock）",
        "title": "cardflow 体检", "backend": "后端", "source": "配置来源", "url": "地址", "reachable": "可连接",
        "detail": "版本 / 错误（原文）", "not configured": "未配置", "yes": "是", "no": "否", "env": "环境变量",
        "instance": "实例 {where}", "not_ready": "尚未就绪：", "all_reachable": "所有后端均可连接",
        "unconfigured": "{name} 未配置（请设置 {variable}，或运行 `cardflow up`）",
        "unreachable": "无法连接 {name}（{url}）：{error}（原文）",
        "config_title": "生效中的配置（cardflow config history 文档名）", "document": "文档", "since": "生效时间",
        "version_column": "版本",
        "by": "操作者", "reason": "原因", "no_config_schema": "此登录无权读取 config 模式（其角色不使用它）",
        "no_config_store": "尚无配置存储：配置服务还没有运行过",
        "streams_title": "流（所有消费组读过后保留 {keep} 条）", "stream": "流",
        "entries": "条目数", "groups": "消费组数", "oldest entry": "最早条目", "trim": "可裁剪到此之前",
        "streams_hidden": "此登录无权读取所有流（其 Redis 用户只能读自己的流）",
        "schemas_title": "发件箱（归档后保留 {outbox} 行）与收件箱（保留 {inbox} 行）", "schema": "模式",
        "outbox rows": "发件箱行数", "unpublished": "尚未发布", "inbox rows": "收件箱行数",
        "age": "{entry}（{hours:.1f} 小时前）",
    },
}  # fmt: skip
"""`doctor`'s words per language."""


def doctor(data_dir: DataDirOption = None, lang: LangOption = CliLang.EN) -> None:
    """cardflow's version; Redis, PostgreSQL and S3 reachable (from env, else the running instance); retention; config in force."""
    from shared.embedded import running_instance
    from shared.settings import Settings

    words = DOCTOR_WORDS[lang]
    settings = Settings()
    where = data_dir_of(settings, data_dir)
    targets = _targets(settings, running_instance(where), where)
    results = asyncio.run(_probe_all(targets))
    console.print(words["version"].format(version=cardflow_version(), python=sys.version.split()[0]))
    console.print(_health_table(targets, results, words))
    problems = [_problem(t, r, words) for t, r in zip(targets, results, strict=True) if r is None or not r.ok]
    if problems:
        errors.print(f"[red]{words['not_ready']}[/red]\n" + "\n".join(f"- {problem}" for problem in problems))
        raise typer.Exit(1)
    console.print(f"[green]{words['all_reachable']}[/green]")
    redis_url, dsn = (targets[0].url, targets[1].url)
    if redis_url and dsn:
        console.print(*asyncio.run(_retention_tables(redis_url, dsn, words)))
    if dsn:
        console.print(asyncio.run(_config_versions(dsn, words)))


def cardflow_version() -> str:
    """The installed cardflow's version (pyproject.toml's, as pip recorded it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cardflow")
    except PackageNotFoundError:
        return "unknown (not installed: run `make install`)"


async def _config_versions(dsn: str, words: dict[str, str]) -> Table:
    """The version in force of every configuration document (`cardflow config history NAME` for more)."""
    import asyncpg

    table = Table(title=words["config_title"])
    for column in ("document", "version_column", "since", "by", "reason"):
        table.add_column(words[column], overflow="fold")
    conn = await asyncpg.connect(dsn)
    try:
        # None: no config schema yet (next check); False: a role without the config schema (the gate's)
        if await conn.fetchval("SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = 'config'") is False:
            table.add_row("-", "-", "", "", words["no_config_schema"])
            return table
        if not await conn.fetchval("SELECT to_regclass('config.versions') IS NOT NULL"):
            table.add_row("-", "-", "", "", words["no_config_store"])
            return table
        rows = await conn.fetch("SELECT DISTINCT ON (name) name, version, at, actor, reason FROM config.versions"
                                " ORDER BY name, version DESC")
    finally:
        await conn.close()
    for row in rows:
        table.add_row(row["name"], str(row["version"]), f"{row['at']:%Y-%m-%d %H:%M:%S}", row["actor"], row["reason"])
    return table


async def _retention_tables(redis_url: str, dsn: str, words: dict[str, str]) -> list[Table]:
    """Streams (length, groups, oldest entry, trim point) and outboxes/inboxes (docs/delivery.md#retention)."""
    import asyncpg
    from redis.asyncio import Redis
    from redis.exceptions import NoPermissionError

    from shared.delivery.retention import DEFAULT_RETENTION, schema_retention_report, stream_retention_report

    redis = Redis.from_url(redis_url)
    try:
        streams = await stream_retention_report(redis)
    except NoPermissionError:  # a service's own Redis user (the gate's, an agent's) reads only its streams
        streams = None
    finally:
        await redis.aclose()
    conn = await asyncpg.connect(dsn)
    try:
        schemas = await schema_retention_report(conn)
    finally:
        await conn.close()
    keep = DEFAULT_RETENTION
    stream_table = Table(title=words["streams_title"].format(keep=keep.stream_keep))
    for column in ("stream", "entries", "groups", "oldest entry", "trim"):
        stream_table.add_column(words[column])
    if streams is None:
        stream_table.caption = words["streams_hidden"]
    for s in streams or []:
        stream_table.add_row(s.stream, str(s.length), str(s.groups), _entry_age(s.oldest_entry, words), s.trim_point or "-")
    schema_table = Table(title=words["schemas_title"].format(outbox=keep.outbox_keep, inbox=keep.inbox_keep))
    for column in ("schema", "outbox rows", "unpublished", "inbox rows"):
        schema_table.add_column(words[column])
    for r in schemas:
        schema_table.add_row(r.schema, str(r.outbox_rows), str(r.outbox_unpublished), str(r.inbox_rows))
    return [stream_table, schema_table]


def _entry_age(entry_id: str | None, words: dict[str, str]) -> str:
    if entry_id is None:
        return "-"
    import time

    seconds = time.time() - int(entry_id.split("-")[0]) / 1000
    return words["age"].format(entry=entry_id, hours=seconds / 3600)


def _targets(settings: Settings, instance: Endpoints | None, where: Path) -> list[Target]:
    from shared.embedded.health import probe_postgres, probe_redis, probe_s3

    source = f"instance {where}" if instance else "-"
    redis_url = settings.redis_url or (instance.redis_url if instance else None)
    dsn = settings.database_dsn or (instance.database_url if instance else None)
    s3 = _external_s3(settings) if settings.s3_endpoint else instance
    return [
        Target("redis", "env" if settings.redis_url else source, (lambda: probe_redis(redis_url)) if redis_url else None, redis_url),
        Target("postgres", "env" if settings.database_dsn else source, (lambda: probe_postgres(dsn)) if dsn else None, dsn),
        Target("s3", "env" if settings.s3_endpoint else source, (lambda: probe_s3(s3)) if s3 else None),
    ]


def _external_s3(settings: Settings) -> Endpoints:
    from shared.embedded import Endpoints

    def secret(value: object) -> str:
        return value.get_secret_value() if value is not None else ""  # type: ignore[attr-defined]

    return Endpoints(
        redis_url="",
        database_url="",
        s3_endpoint=settings.s3_endpoint or "",
        s3_access_key=secret(settings.s3_access_key),
        s3_secret_key=secret(settings.s3_secret_key),
        s3_region=settings.s3_region,
        s3_addressing_style=settings.s3_addressing_style,
    )


async def _probe_all(targets: list[Target]) -> list[BackendHealth | None]:
    async def one(target: Target) -> BackendHealth | None:
        return await target.probe() if target.probe else None

    return list(await asyncio.gather(*(one(t) for t in targets)))


def _health_table(targets: list[Target], results: list[BackendHealth | None], words: dict[str, str]) -> Table:
    table = Table(title=words["title"])
    for column in ("backend", "source", "url", "reachable", "detail"):
        table.add_column(words[column], overflow="fold")
    for target, result in zip(targets, results, strict=True):
        source = _source(target.source, words)
        if result is None:
            table.add_row(target.name, source, "-", f"[red]{words['not configured']}[/red]", "")
        else:
            reachable = f"[green]{words['yes']}[/green]" if result.ok else f"[red]{words['no']}[/red]"
            detail = result.version if result.ok else _clip(result.error)
            table.add_row(target.name, source, result.url_redacted, reachable, detail)
    return table


def _source(source: str, words: dict[str, str]) -> str:
    """Where a backend's settings came from (`Target.source`: env, `instance <dir>` or -), as said."""
    if source == "env":
        return words["env"]
    return words["instance"].format(where=source.removeprefix("instance ")) if source.startswith("instance ") else source


def _problem(target: Target, result: BackendHealth | None, words: dict[str, str]) -> str:
    if result is None:
        hint = {"redis": "CARDFLOW_REDIS_URL", "postgres": "CARDFLOW_DATABASE_URL", "s3": "CARDFLOW_S3_ENDPOINT"}
        return words["unconfigured"].format(name=target.name, variable=hint[target.name])
    return words["unreachable"].format(name=target.name, url=result.url_redacted, error=_clip(result.error))


def _clip(text: str | None, limit: int = 120) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
