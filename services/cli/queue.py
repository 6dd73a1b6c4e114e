"""`cardflow queue [--json] [--lang zh]`: the queue like squeue — running first, then waiting in order.

An API client of `GET /v1/queue?running=true` (any token). Per task: position in the order
`plan()` considers the queue (class, deadline, priority with aging, submit time), class and
priority, GPUs and card type, the estimate, readiness, the reason it waits (or, for a running task,
why it started when it did: in order, backfill past N waiting tasks, its reservation, preemption),
and the estimated start from the dispatcher's last plan (a ⚠ when its deadline is at risk).

`--lang zh` (or `CARDFLOW_LANG=zh`): the headers, states and the CLI's own words in Chinese; the
reason's sentence comes from the API in Chinese (`GET /v1/queue?lang=zh`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()

QUEUE_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "title": "cardflow queue: {running} running, {waiting} waiting", "#": "#", "task": "task", "project": "project",
        "class": "class", "prio": "prio", "GPUs": "GPUs", "card": "card", "est.": "est.", "ready": "ready",
        "state": "state", "why": "why", "est. start": "est. start", "started": "started: {reason}",
        "past": " past {n} waiting", "running": "running", "deadline": " ⚠ deadline",
    },
    CliLang.ZH: {
        "title": "cardflow 队列：运行中 {running} 个，等待中 {waiting} 个", "#": "序号", "task": "任务", "project": "项目",
        "class": "类别", "prio": "优先级", "GPUs": "GPU 数", "card": "卡型", "est.": "预估时长", "ready": "数据就绪",
        "state": "状态", "why": "原因", "est. start": "预计开始", "started": "已启动：{reason}",
        "past": "（越过 {n} 个等待任务）", "running": "运行中", "deadline": " ⚠ 截止时间有风险",
    },
}
"""The table's words; a running task's start reason (`in_order`, `backfill`, …) stays the API's value."""


def register(app: typer.Typer) -> None:
    app.command("queue")(queue)


def queue(
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """The queue: running tasks and why they started, then waiting tasks in order with estimated starts."""
    with cli_api(lang) as api:
        rows = api.get("/v1/queue", running="true", lang=lang.value)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console.print(queue_table(rows, lang))


def queue_table(rows: list[dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    from services.console.labels import state_label

    words = QUEUE_WORDS[lang]
    running = sum(r["position"] is None for r in rows)
    table = Table(title=words["title"].format(running=running, waiting=len(rows) - running))
    for header in ("#", "task", "project", "class", "prio", "GPUs", "card", "est.", "ready", "state", "why",
                   "est. start"):
        table.add_column(words[header], overflow="fold", justify="right" if header in {"#", "prio", "GPUs"} else "left")
    for row in rows:
        table.add_row(
            "" if row["position"] is None else str(row["position"]), row["name"] or row["id"], row["project"] or "",
            row["priority_class"] or "", str(row["priority"] or 0), str(row["gpus"] or ""), row["card_type"] or "",
            _hours(row["est_runtime_s"]), {True: "✓", False: "✗", None: "?"}[row["ready"]],
            state_label(row["state"], lang.value) if lang is CliLang.ZH else row["state"], _why(row, words), _start(row, words),
        )  # fmt: skip
    return table


def _why(row: dict[str, Any], words: dict[str, str]) -> str:
    if row["position"] is None:  # running: why it started then
        started = words["started"].format(reason=row.get("start_reason") or "in_order")
        return started + (words["past"].format(n=row["passed"]) if row.get("passed") else "")
    return row["sentence"] or row["reason"]


def _start(row: dict[str, Any], words: dict[str, str]) -> str:
    if row["position"] is None:
        return words["running"]
    start = row.get("estimated_start")
    text = start[:16].replace("T", " ") if start else "—"
    return text + (words["deadline"] if row.get("deadline_at_risk") else "")


def _hours(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds / 3600:.1f}h"
