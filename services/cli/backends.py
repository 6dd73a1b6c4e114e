"""`cardflow up`, `cardflow endpoints`, `cardflow doctor`: start, show and check the backends.

`up` starts every backend the environment does not configure (embedded real servers under the
data dir), then runs the system parts registered in `SYSTEM_PARTS` (services, agents, console,
demo workload) until Ctrl-C or SIGTERM, and stops everything in reverse order.

`doctor --lang zh` (or `CARDFLOW_LANG=zh`) prints its tables and findings in Chinese; a backend's
own error text stays as it came. `up --lang zh` says its own table and lines in Chinese; what the
system parts print while they run (the services' supervisor, the demo's live view) stays English.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import re
import shlex
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from services.cli.lang import CliLang, LangOption

if TYPE_CHECKING:  # the backends' code is imported inside the commands: `cardflow --help` starts fast
    from services.identity.bootstrap import LocalAdmin
    from shared.embedded import BackendHealth, Endpoints
    from shared.settings import Settings

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # messages stay one line each: grep-able

# A part of the running system: entered once backends are up, exited (reverse order) on shutdown.
# Signature: part(endpoints, demo, lang) -> context manager. Services, agents, the console and the demo
# workload register themselves here (e.g. `SYSTEM_PARTS.append(run_services)`).
SystemPart = Callable[["Endpoints", bool, CliLang], AbstractContextManager[object]]
SYSTEM_PARTS: list[SystemPart] = []


def run_cardflow_processes(endpoints: Endpoints, demo: bool, lang: CliLang = CliLang.EN) -> AbstractContextManager[object]:
    """Every service and the console as supervised subprocesses; with `demo`, a simulated fleet,
    a demo workload and a live view too (see `services.demo.system`; imported lazily: fast CLI)."""
    from services.demo.system import run_cardflow

    return run_cardflow(endpoints, demo, console, lang)


SYSTEM_PARTS.append(run_cardflow_processes)

DataDirOption = Annotated[
    Path | None, typer.Option("--data-dir", help="Instance data directory [default: $CARDFLOW_DATA_DIR or .cardflow]")
]


def register(app: typer.Typer) -> None:
    """Attach `up`, `endpoints` and `doctor`."""
    app.command("up")(up)
    app.command("endpoints")(endpoints)
    app.command("doctor")(doctor)


def _data_dir(settings: Settings, data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else settings.data_dir


UP_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "cannot_start": "cannot start:", "connect": "Connect another terminal:", "running": "Running. Press Ctrl-C to stop.",
        "stopped": "Stopped.", "no_parts": "no system part registered; backends only",
        "title": "cardflow backends (data dir {data_dir})", "backend": "backend", "where": "where", "mode": "mode",
        "embedded": "embedded", "external": "external (from CARDFLOW_*)", "logs": "logs in {path}",
        "subprocesses": "subprocesses", "not started": "not started", "admin token": "admin token",
        "token_where": "user:{name}, in {path} (0600)", "created now": "created now", "kept": "kept from the last start",
    },
    CliLang.ZH: {
        "cannot_start": "无法启动：", "connect": "在另一个终端连接：", "running": "运行中。按 Ctrl-C 停止。",
        "stopped": "已停止。", "no_parts": "没有注册任何系统部件；只启动了后端",
        "title": "cardflow 后端（数据目录 {data_dir}）", "backend": "后端", "where": "位置", "mode": "方式",
        "embedded": "内嵌", "external": "外部（来自 CARDFLOW_*）", "logs": "日志在 {path}",
        "subprocesses": "子进程", "not started": "未启动", "admin token": "管理员令牌",
        "token_where": "user:{name}，在 {path}（0600）", "created now": "刚创建", "kept": "沿用上次启动时的",
    },
}  # fmt: skip
"""`up`'s own words per language (a script that waits for the `Running.` line runs `up` without `--lang zh`)."""


def up(
    demo: Annotated[bool, typer.Option("--demo", help="Also run a simulated fleet and a demo workload")] = False,
    data_dir: DataDirOption = None,
    lang: LangOption = CliLang.EN,
) -> None:
    """Start missing backends (embedded) and the system; run until Ctrl-C."""
    from shared.embedded import Backends, EmbeddedServerError, InstanceAlreadyRunning
    from shared.logging import configure_logging
    from shared.settings import Settings

    configure_logging()
    words = UP_WORDS[lang]
    settings = Settings()
    backends = Backends(settings, _data_dir(settings, data_dir))
    with _graceful_signals(), ExitStack() as stack:
        try:
            found = stack.enter_context(backends)
        except (InstanceAlreadyRunning, EmbeddedServerError) as exc:
            errors.print(f"[red]{words['cannot_start']}[/red] {exc}")
            raise typer.Exit(1) from None
        admin = local_admin(found)
        console.print(_where_table(found, backends.embedded, admin, words))
        console.print(f"{words['connect']} [bold]eval \"$(cardflow endpoints --data-dir {found.data_dir})\"[/bold]")
        run_system(found, demo, stack, lang)
        console.print(words["running"])
        _wait_forever()
    console.print(words["stopped"])


def local_admin(endpoints: Endpoints) -> LocalAdmin:
    """The local user's admin token of this instance (created on first start; see services.identity.bootstrap)."""
    from services.identity.bootstrap import ensure_local_admin

    return asyncio.run(ensure_local_admin(endpoints.database_url, endpoints.data_dir or ".cardflow", local_admin_name()))


def local_admin_name() -> str:
    """The login name, made a valid token name (`user:<name>` is the actor of what the local admin does)."""
    name = re.sub(r"[^A-Za-z0-9._@-]+", "-", getpass.getuser()).strip("-._@")[:64]
    return name or "local-admin"


def run_system(endpoints: Endpoints, demo: bool, stack: ExitStack, lang: CliLang = CliLang.EN) -> list[str]:
    """Enter every registered system part; returns their names."""
    words = UP_WORDS[lang]
    if not SYSTEM_PARTS:
        console.print(f"[yellow]{words['no_parts']}[/yellow]")
    names = []
    for part in SYSTEM_PARTS:
        stack.enter_context(part(endpoints, demo, lang))
        names.append(getattr(part, "__name__", repr(part)))
    return names


@contextlib.contextmanager
def _graceful_signals() -> Iterator[None]:
    """SIGTERM acts like Ctrl-C; once shutdown has begun, further SIGINT/SIGTERM cannot cut it short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_forever() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


def _where_table(endpoints: Endpoints, embedded: list[str], admin: LocalAdmin, words: dict[str, str]) -> Table:
    table = Table(title=words["title"].format(data_dir=endpoints.data_dir))
    for column in ("backend", "where", "mode"):
        table.add_column(words[column], overflow="fold")
    for name, where in endpoints.redacted().items():
        table.add_row(name, where, words["embedded"] if name in embedded else words["external"])
    logs = words["logs"].format(path=Path(endpoints.data_dir or ".cardflow") / "logs")
    started = words["subprocesses"] if SYSTEM_PARTS else words["not started"]
    table.add_row("services", logs, started)
    table.add_row("console/API", "`cardflow console`", started)
    created = words["created now"] if admin.created else words["kept"]
    table.add_row(words["admin token"], words["token_where"].format(name=admin.name, path=admin.path), created)
    return table


def endpoints(
    data_dir: DataDirOption = None,
    show_secrets: Annotated[bool, typer.Option("--show-secrets", help="also export the backends' URLs and keys (passwords included)")] = False,
) -> None:
    """Print what another shell needs to use the running instance, as `export` lines (for `eval`).

    The API URL and the path of the admin token file (0600) always; the backends' settings, with
    their passwords and keys, only with --show-secrets (otherwise as comments with *** in place of
    each secret).
    """
    from services.cli.client import read_instance_api
    from shared.embedded import running_instance
    from shared.settings import Settings

    settings = Settings()
    where = _data_dir(settings, data_dir)
    found = running_instance(where)
    if found is None:
        errors.print(f"no cardflow instance is running on data dir {where} (start one with `cardflow up`)")
        raise typer.Exit(1)
    api = read_instance_api(where) or {}
    lines = [f"export {key}={shlex.quote(value)}\n" for key, value in api.items()]
    if not api:
        lines.append("# no console runs on this instance yet: no CARDFLOW_API_URL\n")
    if show_secrets:
        lines.append(found.to_shell())
    else:
        lines.append(f"export CARDFLOW_DATA_DIR={shlex.quote(found.data_dir or str(where))}\n")
        lines.append("# backends (secrets hidden; `cardflow endpoints --show-secrets` exports them):\n")
        lines += [f"# {key}={value}\n" for key, value in redacted_env(found).items() if key != "CARDFLOW_DATA_DIR"]
    sys.stdout.write("".join(lines))


def redacted_env(found: Endpoints) -> dict[str, str]:
    """`found.as_env()` with every password and key replaced by ***."""
    from shared.settings import redact_url

    hidden = {"CARDFLOW_S3_ACCESS_KEY", "CARDFLOW_S3_SECRET_KEY"}
    return {
        key: "***" if key in hidden else (redact_url(value) or "") if key.endswith("_URL") else value
        for key, value in found.as_env().items()
    }


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
    where = _data_dir(settings, data_dir)
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
