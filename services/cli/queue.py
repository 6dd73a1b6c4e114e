"""`cardflow queue [--json] [--lang zh]`: the queue like squeue — running first, then waiting in order.

An API client of `GET /v1/queue?running=true` (any token). Per task: position in the order
`plan()` considers the queue (class, deadline, priority with aging, submit time), class and
priority, GPUs and card type, the estimate, readiness, the reason it waits (or, for a running task,
why it started when it did: in order, backfill past N waiting tasks, its reservation, preemption),
and the estimated start from the dispatcher's last plan (a ⚠ when its deadline is at risk).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()


def register(app: typer.Typer) -> None:
    app.command("queue")(queue)


def queue(
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
    lang: Annotated[str, typer.Option("--lang", help="language of the reasons: en or zh")] = "en",
) -> None:
    """The queue: running tasks and why they started, then waiting tasks in order with estimated starts."""
    with cli_api(lang) as api:
        rows = api.get("/v1/queue", running="true", lang=lang)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console.print(queue_table(rows))


def queue_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"cardflow queue: {sum(r['position'] is None for r in rows)} running, "
                        f"{sum(r['position'] is not None for r in rows)} waiting")
    for header in ("#", "task", "project", "class", "prio", "GPUs", "card", "est.", "ready", "state", "why",
                   "est. start"):
        table.add_column(header, overflow="fold", justify="right" if header in {"#", "prio", "GPUs"} else "left")
    for row in rows:
        table.add_row(
            "" if row["position"] is None else str(row["position"]), row["name"] or row["id"], row["project"] or "",
            row["priority_class"] or "", str(row["priority"] or 0), str(row["gpus"] or ""), row["card_type"] or "",
            _hours(row["est_runtime_s"]), {True: "✓", False: "✗", None: "?"}[row["ready"]], row["state"],
            _why(row), _start(row),
        )  # fmt: skip
    return table


def _why(row: dict[str, Any]) -> str:
    if row["position"] is None:  # running: why it started then
        reason = row.get("start_reason") or "in_order"
        return f"started: {reason}" + (f" past {row['passed']} waiting" if row.get("passed") else "")
    return row["sentence"] or row["reason"]


def _start(row: dict[str, Any]) -> str:
    if row["position"] is None:
        return "running"
    start = row.get("estimated_start")
    text = start[:16].replace("T", " ") if start else "—"
    return text + (" ⚠ deadline" if row.get("deadline_at_risk") else "")


def _hours(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds / 3600:.1f}h"
