"""`cardflow export --reason TEXT` / `cardflow export --list`: the task list and demand plan into the reports bucket, and what exists."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    list_only: Annotated[bool, typer.Option("--list", help="show the exports that exist instead of writing one")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    reason: Annotated[str, typer.Option("--reason", help="why you export now; required unless --list")] = "",
) -> None:
    """Write every task and the demand per project and card type (CSV + JSON) to the reports bucket."""
    if not list_only and not reason:
        raise typer.BadParameter("an export is recorded with who and why: add --reason TEXT", param_hint="--reason")
    with cli_api() as api:
        rows = api.get("/v1/exports") if list_only else [api.post("/v1/exports", {"reason": reason})]
    if as_json:
        print(json.dumps(rows if list_only else rows[0], indent=2, ensure_ascii=False))
        return
    console.print(exports_table(rows, "exports" if list_only else "written"))


def exports_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=f"{title} ({len(rows)}) in bucket {rows[0]['bucket'] if rows else '-'}")
    for column in ("day", "at", "trigger", "actor", "reason", "tasks", "objects (key @ version)"):
        table.add_column(column, overflow="fold")
    for row in rows:
        objects = "\n".join(f"{o['key']} @ {o['version_id']}" for o in row["objects"])
        table.add_row(row["day"], row["at"][11:19], row["trigger"], row["actor"], row.get("reason") or "–",
                      str(row["tasks"]), objects)  # fmt: skip
    return table
