"""`cardflow nodes`: the fleet like Slurm's `sinfo` — one row per node: card type, state, GPUs used /
borrowed / free, mean utilisation, last heartbeat (an API call; any valid token)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()


def register(app: typer.Typer) -> None:
    app.command("nodes")(nodes)


def nodes(
    card_type: Annotated[str | None, typer.Option("--card-type", help="only nodes of this card type")] = None,
    state: Annotated[str | None, typer.Option("--state", help="only nodes in this state: up or lost")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Every node: card type, state, GPUs used / borrowed (opportunistic) / free, utilisation, last heartbeat."""
    with cli_api() as api:
        rows = api.get("/v1/nodes")
    rows = [row for row in rows if (card_type is None or row["card_type"] == card_type)
            and (state is None or row["state"] == state)]  # fmt: skip
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    console.print(nodes_table(rows, datetime.now(UTC)))


def nodes_table(rows: list[dict[str, Any]], now: datetime) -> Table:
    table = Table(title=f"nodes ({len(rows)})")
    for column in ("node", "card type", "state", "GPUs", "used", "borrowed", "free", "util %", "last heartbeat"):
        table.add_column(column, justify="right" if column in {"GPUs", "used", "borrowed", "free", "util %"} else "left")
    for row in rows:
        util = "-" if row["mean_util_pct"] is None else f"{row['mean_util_pct']:.0f}"
        table.add_row(row["node_id"], row["card_type"], row["state"], str(row["gpus"]), str(row["used"]),
                      str(row["borrowed"]), str(row["free"]), util, _ago(row["last_heartbeat"], now))  # fmt: skip
    return table


def _ago(stamp: str | None, now: datetime) -> str:
    if stamp is None:
        return "-"
    seconds = max(0.0, (now - datetime.fromisoformat(stamp)).total_seconds())
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"
