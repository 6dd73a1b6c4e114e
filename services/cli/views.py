"""`cardflow tasks`, `cardflow status TASK`, `cardflow console`: tasks from the API, serve the console.

`tasks` and `status` are API clients (`services.cli.client`: `CARDFLOW_API_URL` + the caller's
token, else the instance `cardflow up` runs on the data dir); any valid token may read. `--json`
prints machine-readable output (a list for `tasks`, one object with its `history` for `status`);
otherwise rich tables coloured by state, in English or Chinese (`--lang zh`). `console` serves the
API itself, so it needs the database (`CARDFLOW_DATABASE_URL`, else the running local instance).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from services.cli.client import cli_api
from shared.embedded import running_instance
from shared.events.states import TaskState
from shared.projection import TaskView
from shared.settings import Settings, get_settings

console = Console()
errors = Console(stderr=True, soft_wrap=True)


class Lang(StrEnum):
    en = "en"
    zh = "zh"


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]
LangOption = Annotated[Lang, typer.Option("--lang", envvar="CARDFLOW_LANG", help="Labels: en or zh (中文)")]


def register(app: typer.Typer) -> None:
    app.command("tasks")(tasks)
    app.command("status")(status)
    app.command("console")(console_command)


def fail(message: str) -> typer.Exit:
    errors.print(f"[red]error:[/red] {message}")
    return typer.Exit(1)


def resolve_settings() -> Settings:
    """The configured backends, else those of the local instance running on the data dir."""
    settings = get_settings()
    if settings.database_dsn:
        return settings
    found = running_instance(settings.data_dir)
    if found is None:
        raise fail(
            f"no cardflow instance is configured or running: set CARDFLOW_DATABASE_URL, or start one with "
            f"`cardflow up` (looked for a running instance on data dir {settings.data_dir})"
        )
    return found.settings()


def tasks(
    state: Annotated[TaskState | None, typer.Option("--state", help="Only tasks in this state")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000, help="At most this many (most recently changed first)")] = 200,
    as_json: JsonOption = False,
    lang: LangOption = Lang.en,
) -> None:
    """List tasks with their state and the reason they wait (or ended)."""
    with cli_api() as api:
        rows = api.get("/v1/tasks", state=state.value if state else None, limit=limit)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console.print(tasks_table([TaskView.model_validate(row) for row in rows], lang))


def status(
    task: Annotated[str, typer.Argument(help="Task id (or its idempotency key)")],
    as_json: JsonOption = False,
    lang: LangOption = Lang.en,
) -> None:
    """One task: its state, why it waits or how it ended, and its history."""
    from services.console.views import HistoryEntry

    with cli_api() as api:
        found = api.call("GET", f"/v1/tasks/{task}/history", expect=(404, 422))
        answer = found.json() if found.status_code == 200 else None
        if answer is None:
            [view] = api.get("/v1/tasks", idempotency_key=task) or [None]
            answer = api.get(f"/v1/tasks/{view['id']}/history") if view else None
        if answer is None:
            raise fail(f"no task {task!r} in the views (neither an id nor an idempotency key); "
                       "a task submitted a moment ago may take a moment to appear")  # fmt: skip
        view = TaskView.model_validate(answer["task"])
        checklist = _waiting_checklist(api, view)
    if as_json:
        print(json.dumps(answer["task"] | {"history": answer["history"], "checklist": checklist}, ensure_ascii=False,
                         indent=2))  # fmt: skip
        return
    console.print(status_table(view, lang))
    if checklist is not None:
        from services.cli.preflight import checklist_table

        console.print(checklist_table(checklist, "pre-flight"))
    console.print(history_table([HistoryEntry.model_validate(entry) for entry in answer["history"]], lang))


WAITING_STATES = frozenset({TaskState.SUBMITTED, TaskState.WAITING_DATA, TaskState.UNMATCHABLE, TaskState.QUEUED,
                            TaskState.HELD})  # fmt: skip


def _waiting_checklist(api: Any, view: TaskView) -> dict[str, Any] | None:
    """The pre-flight checklist of a task that waits (`GET /v1/tasks/{id}/check`), else None."""
    if view.state not in WAITING_STATES:
        return None
    found = api.call("GET", f"/v1/tasks/{view.id}/check", expect=(404, 409))
    return found.json() if found.status_code == 200 else None


def console_command(
    host: Annotated[str, typer.Option("--host", help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on")] = 8080,
) -> None:
    """Serve the HTTP API (/v1, /docs) and the web console (/) until Ctrl-C."""
    import uvicorn

    from services.console.app import create_app
    from shared.logging import configure_logging

    configure_logging()
    settings = resolve_settings()
    console.print(f"cardflow console on http://{host}:{port}/  (API docs: http://{host}:{port}/docs)")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


# ---- rendering --------------------------------------------------------------------------------


def state_text(state: TaskState, lang: Lang) -> Text:
    from services.console.labels import STATE_STYLES, state_label

    return Text(state_label(state, lang.value), style=STATE_STYLES[state])


def tasks_table(views: list[TaskView], lang: Lang) -> Table:
    from services.console.labels import UI_LABELS, reason_label

    label = UI_LABELS[lang.value]
    table = Table(title=f"{label['tasks']} ({len(views)})")
    for column in ("task", "name", "state", "reason", "project", "card_type", "node", "updated"):
        table.add_column(label[column], overflow="fold")
    for view in views:
        reason = Text(reason_label(view.reason, lang.value))
        reason.append(f"\n{view.reason_detail}", style="dim")
        updated = view.last_event_at.strftime("%Y-%m-%d %H:%M:%S") if view.last_event_at else ""
        table.add_row(view.id, view.name or "-", state_text(view.state, lang), reason, view.project or "",
                      view.card_type or "", view.node_id or "", updated)
    return table


def status_table(view: TaskView, lang: Lang) -> Table:
    from services.console.labels import UI_LABELS, reason_label

    label = UI_LABELS[lang.value]
    table = Table(title=f"{label['task']} {view.id}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    cost = f"{view.match.est_cost:.2f}" if view.match else ""
    progress = f"{view.progress:.0%}" if view.progress is not None else ""
    for key, value in (
        ("name", view.name or "-"), ("state", state_text(view.state, lang)),
        ("reason", f"{reason_label(view.reason, lang.value)}: {view.reason_detail}"),
        ("project", view.project or ""), ("template", view.template or "-"), ("priority", f"{view.priority_class or ''} {view.priority or ''}".strip()),
        ("gpus", str(view.gpus or "")), ("card_type", view.card_type or ""), ("node", view.node_id or ""),
        ("cost", cost), ("used_cost", f"{view.used_cost:.2f}"), ("progress", progress),
        ("attempts", str(view.attempts)), ("missing", ", ".join(view.missing_inputs)),
    ):
        table.add_row(label[key], value)
    return table


def history_table(history: list[Any], lang: Lang) -> Table:
    from services.console.labels import UI_LABELS, reason_label

    label = UI_LABELS[lang.value]
    table = Table(title=label["history"])
    for column in ("updated", "event", "state", "reason"):
        table.add_column(label.get(column, column), overflow="fold")
    for entry in history:
        reason = Text(reason_label(entry.reason, lang.value))
        reason.append(f"\n{entry.detail}", style="dim")
        table.add_row(entry.occurred_at.strftime("%Y-%m-%d %H:%M:%S"), entry.type, state_text(entry.state, lang), reason)
    return table
