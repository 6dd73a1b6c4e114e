"""`cardflow submit FILE [--wait]` and `cardflow cancel TASK`: write `cf:ingest` entries.

`submit` does exactly what an upstream system does (docs/ingest.md): one `XADD cf:ingest` per
submission with `type=task.submit`, `payload=<JSON>`, `actor=user:<login>`. A submission without
an `idempotency_key` gets one derived from its content (`cli-<sha256 prefix>`), so running the
same command again never creates a second task, and `--wait` can find each task in the console's
task view. `--wait` polls that view until every task has ended and exits non-zero unless all
succeeded (1: some failed, were rejected or cancelled; 2: the timeout passed first).
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from redis.asyncio import Redis
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from shared.names import INGEST_STREAM
from shared.settings import Settings
from shared.submission import SubmissionFileError, load_submission_file

console = Console()
errors = Console(stderr=True, soft_wrap=True)

KEY_PREFIX = "cli-"
POLL_SECONDS = 0.5
EXIT_NOT_ALL_SUCCEEDED = 1
EXIT_TIMED_OUT = 2


def derive_key(raw: dict[str, Any]) -> str:
    """A key that depends only on the submission's content (canonical JSON, sorted keys)."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def with_key(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with an idempotency key: its own when it has one, else `derive_key(raw)`."""
    if raw.get("idempotency_key") is not None:
        return raw
    return {**raw, "idempotency_key": derive_key(raw)}


def ingest_fields(entry_type: str, payload: dict[str, Any], actor: str) -> dict[str, str]:
    """The fields of one `cf:ingest` entry (the contract in docs/ingest.md)."""
    return {"type": entry_type, "payload": json.dumps(payload, ensure_ascii=False), "actor": actor}


def default_actor() -> str:
    return f"user:{getpass.getuser()}"


async def send(redis_url: str, entries: Sequence[dict[str, str]]) -> list[str]:
    """XADD each entry to `cf:ingest` in order; the entry ids."""
    redis = Redis.from_url(redis_url)
    try:
        return [(await redis.xadd(INGEST_STREAM, fields)).decode() for fields in entries]
    finally:
        await redis.aclose()


def sent_table(submissions: Sequence[dict[str, Any]], entry_ids: Sequence[str]) -> Table:
    table = Table(title=f"sent to {INGEST_STREAM}")
    for column in ("#", "name", "project", "gpus", "idempotency key", "entry id"):
        table.add_column(column)
    for index, (raw, entry_id) in enumerate(zip(submissions, entry_ids, strict=True), start=1):
        table.add_row(str(index), *(_cell(raw.get(f)) for f in ("name", "project", "gpus", "idempotency_key")), entry_id)
    return table


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


async def wait_for_tasks(settings: Settings, submissions: Sequence[dict[str, Any]], timeout: float) -> int:
    """Poll the task view until every submission's task ended; the exit code (module docstring)."""
    from services.console.views import find_task_by_idempotency_key
    from shared.delivery.db import create_pool

    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=2)
    keys = [str(raw["idempotency_key"]) for raw in submissions]
    views: dict[str, Any] = {}
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[state]}"),
                      console=console) as progress:  # fmt: skip
            rows = {key: progress.add_task(_cell(raw.get("name")) or key, total=1, state="sent") for key, raw in zip(keys, submissions)}
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while not _all_ended(views, keys) and loop.time() < deadline:
                for key in keys:
                    views[key] = await find_task_by_idempotency_key(pool, key) or views.get(key)
                    _show(progress, rows[key], views[key])
                if not _all_ended(views, keys):
                    await asyncio.sleep(POLL_SECONDS)
    finally:
        await pool.close()
    console.print(_result_table(submissions, keys, views))
    if not _all_ended(views, keys):
        errors.print(f"timed out after {timeout:g} s: some tasks have not ended yet")
        return EXIT_TIMED_OUT
    return 0 if all(views[key].state.value == "succeeded" for key in keys) else EXIT_NOT_ALL_SUCCEEDED


def _all_ended(views: dict[str, Any], keys: Sequence[str]) -> bool:
    return all(views.get(key) is not None and views[key].state.is_terminal for key in keys)


def _show(progress: Progress, row: Any, view: Any) -> None:
    if view is None:
        progress.update(row, state="not seen yet")
        return
    progress.update(row, state=f"{view.state.value}: {view.reason_detail or view.reason}"[:120],
                    completed=1 if view.state.is_terminal else 0)  # fmt: skip


def _result_table(submissions: Sequence[dict[str, Any]], keys: Sequence[str], views: dict[str, Any]) -> Table:
    table = Table(title="tasks")
    for column in ("name", "task id", "state", "why"):
        table.add_column(column)
    for raw, key in zip(submissions, keys, strict=True):
        view = views.get(key)
        state = view.state.value if view else "not seen"
        table.add_row(_cell(raw.get("name")), view.id if view else "", state, view.reason_detail if view else "")
    return table


def _require_redis(settings: Settings) -> str:
    if not settings.redis_url:
        errors.print("CARDFLOW_REDIS_URL is not set (`cardflow endpoints` prints the running instance's settings)")
        raise typer.Exit(2)
    return settings.redis_url


def submit(
    file: Annotated[Path, typer.Argument(help="JSON or YAML file: one submission or a list of them", exists=True, dir_okay=False)],
    wait: Annotated[bool, typer.Option("--wait", help="wait until every task has ended; exit 1 unless all succeeded")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds --wait waits at most (exit 2 after)")] = 600.0,
    actor: Annotated[str | None, typer.Option("--actor", help="who submits [default: user:<login>]")] = None,
) -> None:
    """Submit tasks from FILE to cf:ingest, like an upstream system would (see docs/ingest.md)."""
    from services.cli.views import resolve_settings

    settings = resolve_settings()
    redis_url = _require_redis(settings)
    try:
        submissions = [with_key(raw) for raw in load_submission_file(file)]
    except SubmissionFileError as error:
        errors.print(str(error))
        raise typer.Exit(2) from None
    who = actor or default_actor()
    entry_ids = asyncio.run(send(redis_url, [ingest_fields("task.submit", raw, who) for raw in submissions]))
    console.print(sent_table(submissions, entry_ids))
    if wait:
        code = asyncio.run(wait_for_tasks(settings, submissions, timeout))
        raise typer.Exit(code)


def cancel(
    task_id: Annotated[str, typer.Argument(help="id of the task to cancel")],
    reason: Annotated[str | None, typer.Option("--reason", help="why, shown in the task's history")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="who asks [default: user:<login>]")] = None,
) -> None:
    """Ask to cancel TASK (a task.cancel entry on cf:ingest; the dispatcher stops it)."""
    from services.cli.views import resolve_settings

    redis_url = _require_redis(resolve_settings())
    payload = {"task_id": task_id, **({"reason": reason} if reason else {})}
    [entry_id] = asyncio.run(send(redis_url, [ingest_fields("task.cancel", payload, actor or default_actor())]))
    console.print(f"cancel of {task_id} requested ({INGEST_STREAM} entry {entry_id})")


def register(app: typer.Typer) -> None:
    """Attach `submit` and `cancel`."""
    app.command("submit")(submit)
    app.command("cancel")(cancel)
