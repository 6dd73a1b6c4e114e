"""`cardflow submit FILE [--wait]` and `cardflow cancel TASK --reason`: API clients of the console.

`submit` sends each submission of the file as `POST /v1/tasks` with the caller's token, so it is
validated at once: the table says for each whether it became a task, was submitted before (same
idempotency key) or was rejected, with every problem. A submission without an `idempotency_key`
gets one derived from its content (`cli-<sha256 prefix>`), so running the same command again never
creates a second task. `--wait` then polls `GET /v1/tasks/{id}` until every task has ended and
exits non-zero unless all succeeded (1: some failed, were rejected or cancelled; 2: the timeout
passed first). 401/403 end the command at once with one line (exit 3) and nothing submitted.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn
from rich.table import Table

from services.cli.client import ApiClient, cli_api
from shared.submission import SubmissionFileError, load_submission_file

console = Console()
errors = Console(stderr=True, soft_wrap=True)

KEY_PREFIX = "cli-"
POLL_SECONDS = 0.5
EXIT_NOT_ALL_SUCCEEDED = 1
EXIT_TIMED_OUT = 2
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "rejected"})


def derive_key(raw: dict[str, Any]) -> str:
    """A key that depends only on the submission's content (canonical JSON, sorted keys)."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def with_key(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with an idempotency key: its own when it has one, else `derive_key(raw)`."""
    if raw.get("idempotency_key") is not None:
        return raw
    return {**raw, "idempotency_key": derive_key(raw)}


@dataclass(frozen=True)
class Sent:
    """What the API answered for one submission."""

    raw: dict[str, Any]
    task_id: str | None
    outcome: str  # created | submitted before | rejected | conflict
    problems: list[dict[str, Any]]

    @property
    def accepted(self) -> bool:
        return self.outcome in ("created", "submitted before")


def send(api: ApiClient, raw: dict[str, Any]) -> Sent:
    """POST one submission; 201 created, 200 the key was used before, 409/422 rejected with problems."""
    response = api.call("POST", "/v1/tasks", body=raw, expect=(409, 422))
    answer = response.json()
    if response.status_code in (409, 422):
        outcome = "conflict" if response.status_code == 409 else "rejected"
        return Sent(raw, answer.get("task_id"), outcome, answer.get("problems", []))
    return Sent(raw, answer["task_id"], "created" if answer["created"] else "submitted before", [])


def sent_table(sent: Sequence[Sent]) -> Table:
    table = Table(title="submitted")
    for column in ("#", "name", "project", "gpus", "idempotency key", "task id", "outcome"):
        table.add_column(column, overflow="fold")
    for index, item in enumerate(sent, start=1):
        outcome = item.outcome + "".join(f"\n{p['field']}: {p['expected']} (got {p['value']!r})" for p in item.problems)
        cells = (_cell(item.raw.get(f)) for f in ("name", "project", "gpus", "idempotency_key"))
        table.add_row(str(index), *cells, item.task_id or "", outcome)
    return table


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def wait_for_tasks(api: ApiClient, sent: Sequence[Sent], timeout: float) -> int:
    """Poll each task until every one has ended; the exit code (module docstring)."""
    views: dict[int, dict[str, Any]] = {i: {"state": "rejected", "id": s.task_id} for i, s in enumerate(sent) if not s.accepted}
    deadline = time.monotonic() + timeout
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.fields[state]}"),
                  console=console) as progress:  # fmt: skip
        rows = {i: progress.add_task(_cell(s.raw.get("name")) or s.task_id or "", total=1, state="sent") for i, s in enumerate(sent)}
        while not _all_ended(views, sent) and time.monotonic() < deadline:
            for index, item in enumerate(sent):
                if item.accepted and views.get(index, {}).get("state") not in TERMINAL_STATES:
                    response = api.call("GET", f"/v1/tasks/{item.task_id}", expect=(404,))
                    views[index] = response.json() if response.status_code == 200 else {}
                _show(progress, rows[index], views.get(index))
            if not _all_ended(views, sent):
                time.sleep(POLL_SECONDS)
    console.print(_result_table(sent, views))
    if not _all_ended(views, sent):
        errors.print(f"timed out after {timeout:g} s: some tasks have not ended yet")
        return EXIT_TIMED_OUT
    return 0 if all(view["state"] == "succeeded" for view in views.values()) else EXIT_NOT_ALL_SUCCEEDED


def _all_ended(views: dict[int, dict[str, Any]], sent: Sequence[Sent]) -> bool:
    return all(views.get(i, {}).get("state") in TERMINAL_STATES for i in range(len(sent)))


def _show(progress: Progress, row: Any, view: dict[str, Any] | None) -> None:
    if not view:
        progress.update(row, state="not seen yet")
        return
    state = view["state"]
    progress.update(row, state=f"{state}: {view.get('reason_detail') or view.get('reason') or ''}"[:120],
                    completed=1 if state in TERMINAL_STATES else 0)  # fmt: skip


def _result_table(sent: Sequence[Sent], views: dict[int, dict[str, Any]]) -> Table:
    table = Table(title="tasks")
    for column in ("name", "task id", "state", "why"):
        table.add_column(column, overflow="fold")
    for index, item in enumerate(sent):
        view = views.get(index) or {}
        why = view.get("reason_detail") or "; ".join(f"{p['field']}: {p['expected']}" for p in item.problems)
        table.add_row(_cell(item.raw.get("name")), item.task_id or "", view.get("state", "not seen"), why or "")
    return table


def submit(
    file: Annotated[Path, typer.Argument(help="JSON or YAML file: one submission or a list of them", exists=True, dir_okay=False)],
    wait: Annotated[bool, typer.Option("--wait", help="wait until every task has ended; exit 1 unless all succeeded")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds --wait waits at most (exit 2 after)")] = 600.0,
) -> None:
    """Submit tasks from FILE through the API (needs role submitter for their project)."""
    try:
        submissions = [with_key(raw) for raw in load_submission_file(file)]
    except SubmissionFileError as error:
        errors.print(str(error))
        raise typer.Exit(2) from None
    with cli_api() as api:
        sent = [send(api, raw) for raw in submissions]
        console.print(sent_table(sent))
        code = wait_for_tasks(api, sent, timeout) if wait else 0
    if code or any(not item.accepted for item in sent):
        raise typer.Exit(code or EXIT_NOT_ALL_SUCCEEDED)


def cancel(
    task_id: Annotated[str, typer.Argument(help="id of the task to cancel")],
    reason: Annotated[str, typer.Option("--reason", help="why, shown in the task's history")] = "",
) -> None:
    """Ask to cancel TASK (the dispatcher stops it); needs role submitter for the task's project."""
    with cli_api() as api:
        api.post(f"/v1/tasks/{task_id}/cancel", {"reason": reason or None})
    console.print(f"cancel of {task_id} requested")


def register(app: typer.Typer) -> None:
    """Attach `submit` and `cancel`."""
    app.command("submit")(submit)
    app.command("cancel")(cancel)
