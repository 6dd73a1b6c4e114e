"""`cardflow deadletter list|show|replay|purge`: what no consumer could process, and what to do about it.

API calls with an operator token. `replay` and `purge` need `--reason`; each is recorded as an
event (`deadletter.replayed` / `deadletter.purged`) with the caller as actor.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()
errors = Console(stderr=True, soft_wrap=True)

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded in the event (required)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Dead letters (cf:deadletter): list, show, replay, purge (operator).", no_args_is_help=True)
    app.add_typer(group, name="deadletter")
    group.command("list")(list_command)
    group.command("show")(show)
    group.command("replay")(replay)
    group.command("purge")(purge)


def list_command(
    stream: Annotated[str | None, typer.Option("--stream", help="only entries from this stream, e.g. cf:ingest")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    as_json: JsonOption = False,
) -> None:
    """Dead entries, oldest first: where each came from, why it died, how often it was tried."""
    with cli_api() as api:
        rows = api.get("/v1/deadletters", stream=stream, limit=limit)
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    console.print(deadletters_table(rows))


def show(deadletter_id: Annotated[str, typer.Argument(help="the entry's id in cf:deadletter")], as_json: JsonOption = False) -> None:
    """One dead entry with its error and every original field."""
    with cli_api() as api:
        row = api.get(f"/v1/deadletters/{deadletter_id}")
    if as_json:
        print(json.dumps(row, indent=2, ensure_ascii=False))
        return
    table = Table(title=f"dead letter {deadletter_id}", show_header=False)
    for key in ("stream", "group", "consumer", "entry_id", "reason", "deliveries", "dead_at", "error"):
        table.add_row(key, str(row[key]))
    for key, value in row["original"].items():
        table.add_row(f"original {key}", value)
    console.print(table)


def replay(deadletter_id: Annotated[str, typer.Argument(help="the entry's id in cf:deadletter")], reason: ReasonOption) -> None:
    """Put the entry back on its stream (every group of it reads it again; consumers skip what they applied)."""
    with cli_api() as api:
        answer = api.post(f"/v1/deadletters/{deadletter_id}/replay", {"reason": reason})
    console.print(f"replayed {deadletter_id} onto {answer['stream']} as {answer['replayed_as']} (event {answer['event_id']})")


def purge(
    reason: ReasonOption,
    ids: Annotated[list[str] | None, typer.Argument(help="the entries' ids (or --before)")] = None,
    before: Annotated[datetime | None, typer.Option("--before", help="every entry dead before this time (UTC)")] = None,
) -> None:
    """Delete dead entries for good: the ones named, or every one dead before --before."""
    if bool(ids) == (before is not None):
        raise typer.BadParameter("name the entries to purge, or give --before (not both)")
    body: dict[str, Any] = {"reason": reason, "ids": ids or None,
                            "dead_before": before.isoformat() + ("Z" if before.tzinfo is None else "") if before else None}
    with cli_api() as api:
        answer = api.post("/v1/deadletters/purge", body)
    console.print(f"purged {len(answer['purged'])} dead-letter entr{'y' if len(answer['purged']) == 1 else 'ies'}")


def deadletters_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"dead letters ({len(rows)})")
    for column in ("id", "stream", "group", "reason", "tries", "dead at", "error"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["deadletter_id"], row["stream"], row["group"], row["reason"], str(row["deliveries"]),
                      row["dead_at"], row["error"][:120])  # fmt: skip
    return table
