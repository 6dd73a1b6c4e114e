"""`cardflow tasks`, `cardflow status TASK`, `cardflow console`: tasks from the API, serve the console.

`tasks` and `status` are API clients (`services.cli.client`: `CARDFLOW_API_URL` + the caller's
token, else the instance `cardflow up` runs on the data dir); any valid token may read. `--json`
prints machine-readable output (a list for `tasks`, one object with its `history` for `status`);
otherwise rich tables coloured by state, in English or Chinese (`--lang zh`). `tasks` filters like
Slurm's `squeue`: `--state` takes what the table prints (`no card fits`, `等待数据`) or the machine
value (`unmatchable`), `--project`, `--class`, `--name` (`*` wildcards) and `--since` (`2h`, `3d`,
a date). `status` takes a task id, its idempotency key or a name only one task has; an unknown
task ends with exit 1 and a sentence. `console` serves the API itself, so it needs the database
(`CARDFLOW_DATABASE_URL`, else the running local instance).

Only typer and rich are imported with the module: the rest (labels, settings, the console's code)
inside the commands, so `cardflow --help` starts fast (tests/unit/test_cli_import_budget.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from services.cli.lang import CliLang, LangOption
from services.cli.task_refs import TaskArgument

if TYPE_CHECKING:
    from shared.settings import Settings

console = Console()
errors = Console(stderr=True, soft_wrap=True)


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]
STATE_VALUES = ("submitted", "waiting_data", "unmatchable", "queued", "held", "leased", "running", "succeeded", "failed",
                "cancelled", "rejected")  # fmt: skip
"""`TaskState`'s values (for completion without importing the event package)."""

ERRORS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"error": "error: ", "unknown_state": "unknown state {text!r}; one of {shown}",
                 "not_in_views": "task {task} was submitted but the views do not show it yet; try again in a moment",
                 "no_instance": "no cardflow instance is configured or running: set CARDFLOW_DATABASE_URL, or start one with"
                                " `cardflow up` (looked for a running instance on data dir {data_dir})"},
    CliLang.ZH: {"error": "错误：", "unknown_state": "未知状态 {text!r}；可选：{shown}",
                 "not_in_views": "任务 {task} 已提交，但视图中还看不到它；请稍后再试",
                 "no_instance": "没有已配置或运行中的 cardflow 实例：请设置 CARDFLOW_DATABASE_URL，或用 `cardflow up` 启动一个"
                                "（已在数据目录 {data_dir} 查找运行中的实例）"},
}  # fmt: skip
"""The errors `tasks`, `status` and `token bootstrap` write themselves, per language."""

COLUMNS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"class": "Class", "submitted": "Submitted (UTC)", "elapsed": "Elapsed"},
    CliLang.ZH: {"class": "类别", "submitted": "提交时间 (UTC)", "elapsed": "运行时长"},
}


def register(app: typer.Typer) -> None:
    app.command("tasks")(tasks)
    app.command("status")(status)
    app.command("console")(console_command)


def fail(message: str, lang: CliLang = CliLang.EN) -> typer.Exit:
    errors.print(f"[red]{ERRORS[lang]['error']}[/red]{message}", markup=True, highlight=False)
    return typer.Exit(1)


def resolve_settings(lang: CliLang = CliLang.EN) -> Settings:
    """The configured backends, else those of the local instance running on the data dir."""
    from shared.embedded import running_instance
    from shared.settings import get_settings

    settings = get_settings()
    if settings.database_dsn:
        return settings
    found = running_instance(settings.data_dir)
    if found is None:
        raise fail(ERRORS[lang]["no_instance"].format(data_dir=settings.data_dir), lang)
    return found.settings()


def parse_state(text: str, lang: CliLang = CliLang.EN) -> str:
    """The state value `text` names: a value (`unmatchable`) or what the table prints, in English or
    Chinese (`no card fits`, `无可用卡型`); case and `-`/`_`/space do not matter."""
    from services.console.labels import STATE_LABELS

    def norm(word: str) -> str:
        return " ".join(word.strip().lower().replace("_", " ").replace("-", " ").split())

    names = {norm(value): value for value in STATE_VALUES}
    for labels in STATE_LABELS.values():
        names |= {norm(label): value for value, label in labels.items()}
    if norm(text) in names:
        return names[norm(text)]
    labels = STATE_LABELS[lang.value]
    shown = ", ".join(f"{labels[v]!r}" + (f" ({v})" if labels[v] != v else "") for v in STATE_VALUES)
    raise typer.BadParameter(ERRORS[lang]["unknown_state"].format(text=text, shown=shown), param_hint="--state")


def _complete_state(incomplete: str) -> list[str]:
    return [value for value in STATE_VALUES if value.startswith(incomplete)]


def tasks(
    state: Annotated[str | None, typer.Option("--state", "-t", autocompletion=_complete_state,
                                              help="Only tasks in this state: as the table prints it ('no card fits') or its value (unmatchable)")] = None,
    project: Annotated[str | None, typer.Option("--project", "-p", help="Only this project's tasks")] = None,
    priority_class: Annotated[str | None, typer.Option("--class", "-c", help="Only this class: core, standard or opportunistic")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Only tasks with this name; * matches anything (eval-*)")] = None,
    since: Annotated[str | None, typer.Option("--since", "-S", help="Only tasks submitted since: 2h, 3d, today, 2026-11-30 or an ISO time")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000, help="At most this many (most recently changed first)")] = 200,
    as_json: JsonOption = False,
    lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """List tasks: state and why they wait (or ended), class, GPUs, submitted, elapsed — like squeue."""
    from services.cli.client import cli_api
    from services.cli.times import parse_when

    now = datetime.now(UTC)
    try:
        submitted_since = parse_when(since, now, lang).isoformat() if since else None
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--since") from None
    query = {"state": parse_state(state, lang) if state else None, "project": project, "priority_class": priority_class,
             "name": name, "since": submitted_since, "limit": limit}  # fmt: skip
    with cli_api(lang) as api:
        rows = api.get("/v1/tasks", **query)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console.print(tasks_table(rows, lang, now))


def status(task: TaskArgument, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """One task: its state, why it waits or how it ended, and its history."""
    from services.cli.client import cli_api
    from services.cli.task_refs import task_id_of

    with cli_api(lang) as api:
        task_id = task_id_of(api, task)
        found = api.call("GET", f"/v1/tasks/{task_id}/story", expect=(404,), params={"lang": lang.value})
        if found.status_code == 404:
            raise fail(ERRORS[lang]["not_in_views"].format(task=task_id), lang)
        answer = found.json()
        checklist = _waiting_checklist(api, answer["task"], lang)
    if as_json:
        print(json.dumps(answer["task"] | {"history": answer["history"], "checklist": checklist}, ensure_ascii=False,
                         indent=2))  # fmt: skip
        return
    console.print(status_table(answer["task"], lang, answer["sentence"], answer["original_needed"]))
    if checklist is not None:
        from services.cli.preflight import CHECKLIST_WORDS, checklist_table

        console.print(checklist_table(checklist, CHECKLIST_WORDS[lang]["pre-flight"], lang))
    console.print(history_table(answer["history"], lang))


WAITING_STATES = frozenset({"submitted", "waiting_data", "unmatchable", "queued", "held"})


def _waiting_checklist(api: Any, view: dict[str, Any], lang: CliLang) -> dict[str, Any] | None:
    """The pre-flight checklist of a task that waits (`GET /v1/tasks/{id}/check`), else None."""
    if view["state"] not in WAITING_STATES:
        return None
    found = api.call("GET", f"/v1/tasks/{view['id']}/check", expect=(404, 409), params={"lang": lang.value})
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


# ---- rendering (from the API's JSON: no model classes to import) -------------------------------


def state_text(state: str, lang: CliLang) -> Text:
    from services.console.labels import STATE_STYLES, state_label

    styles = {str(key): style for key, style in STATE_STYLES.items()}
    return Text(state_label(state, lang.value), style=styles.get(state, ""))


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def elapsed_seconds(view: dict[str, Any], now: datetime) -> float | None:
    """How long it has run (started to finished, or to now while it runs); None before it started."""
    started = _time(view.get("started_at"))
    if started is None:
        return None
    return ((_time(view.get("finished_at")) or now) - started).total_seconds()


def tasks_table(views: list[dict[str, Any]], lang: CliLang, now: datetime) -> Table:
    from services.cli.times import format_elapsed
    from services.console.labels import UI_LABELS, reason_label

    label, more = UI_LABELS[lang.value], COLUMNS[lang]
    table = Table(title=f"{label['tasks']} ({len(views)})")
    for column in ("task", "name", "state", "reason", "project", "class", "gpus", "card_type", "node", "submitted", "elapsed"):
        table.add_column(label.get(column) or more[column], overflow="fold")
    for view in views:
        reason = Text(reason_label(view.get("reason") or "", lang.value))
        reason.append(f"\n{view.get('reason_detail') or ''}", style="dim")
        submitted = _time(view.get("submitted_at"))
        table.add_row(view["id"], view.get("name") or "-", state_text(view["state"], lang), reason, view.get("project") or "",
                      view.get("priority_class") or "", str(view.get("gpus") or ""), view.get("card_type") or "",
                      view.get("node_id") or "", f"{submitted:%Y-%m-%d %H:%M}" if submitted else "",
                      format_elapsed(elapsed_seconds(view, now)))  # fmt: skip
    return table


def status_table(view: dict[str, Any], lang: CliLang, sentence: str, original_needed: bool) -> Table:
    """The task's facts; its reason with the story's sentence in `lang` (the English one beside as 原文 when it says more)."""
    from services.console.labels import UI_LABELS, reason_label

    label = UI_LABELS[lang.value]
    table = Table(title=f"{label['task']} {view['id']}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    match = view.get("match") or {}
    cost = f"{match['est_cost']:.2f}" if match.get("est_cost") is not None else ""
    progress = f"{view['progress']:.0%}" if view.get("progress") is not None else ""
    priority = f"{view.get('priority_class') or ''} {view.get('priority') if view.get('priority') is not None else ''}"
    for key, value in (
        ("name", view.get("name") or "-"), ("state", state_text(view["state"], lang)),
        ("reason", f"{reason_label(view.get('reason') or '', lang.value)}: {sentence}"
                   + (f"\n{label['original']}: {view.get('reason_detail')}" if original_needed else "")),
        ("project", view.get("project") or ""), ("template", view.get("template") or "-"), ("priority", priority.strip()),
        ("gpus", str(view.get("gpus") or "")), ("card_type", view.get("card_type") or ""), ("node", view.get("node_id") or ""),
        ("cost", cost), ("used_cost", f"{view.get('used_cost') or 0:.2f}"), ("progress", progress),
        ("attempts", str(view.get("attempts") or 0)), ("missing", ", ".join(view.get("missing_inputs") or ())),
    ):  # fmt: skip
        table.add_row(label[key], value)
    return table


def history_table(history: list[dict[str, Any]], lang: CliLang) -> Table:
    """Each story line: time, event (its Chinese name and type with `--lang zh`), state, reason and sentence."""
    from services.console.labels import UI_LABELS, reason_label

    label = UI_LABELS[lang.value]
    table = Table(title=label["history"])
    for column in ("updated", "event", "state", "reason"):
        table.add_column(label.get(column, column), overflow="fold")
    for entry in history:
        reason = Text(reason_label(entry.get("reason") or "", lang.value))
        reason.append(f"\n{entry.get('sentence') or ''}".rstrip(), style="dim")
        if entry.get("original_needed"):
            reason.append(f"\n{label['original']}: {entry.get('detail') or ''}", style="dim italic")
        event = entry["type"] if lang is CliLang.EN else f"{entry['event_label']}\n{entry['type']}"
        occurred = _time(entry["occurred_at"])
        table.add_row(f"{occurred:%Y-%m-%d %H:%M:%S}" if occurred else "", event, state_text(entry["state"], lang), reason)
    return table
