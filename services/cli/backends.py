"""`cardflow up`, `cardflow endpoints`: start the backends and the system, show where they are.

`up` starts every backend the environment does not configure (embedded real servers under the
data dir), then runs the system parts registered in `SYSTEM_PARTS` (services, agents, console,
demo workload) until Ctrl-C or SIGTERM, and stops everything in reverse order.

`cardflow doctor` (services/cli/doctor.py) checks them. `up --lang zh` says its own table and lines
in Chinese; what the system parts print while they run (the services' supervisor, the demo's live
view) stays English.
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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from services.cli.lang import CliLang, LangOption

if TYPE_CHECKING:  # the backends' code is imported inside the commands: `cardflow --help` starts fast
    from services.identity.bootstrap import LocalAdmin
    from shared.embedded import Endpoints
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
    """Attach `up` and `endpoints`."""
    app.command("up")(up)
    app.command("endpoints")(endpoints)


def data_dir_of(settings: Settings, data_dir: Path | None) -> Path:
    """`--data-dir` if given, else the settings' (`$CARDFLOW_DATA_DIR` or .cardflow)."""
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
    backends = Backends(settings, data_dir_of(settings, data_dir))
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
    where = data_dir_of(settings, data_dir)
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
