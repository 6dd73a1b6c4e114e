"""`cardflow ledger` (usage and cost totals) and `cardflow quota grant | list` (quota accounts).

API clients (`services.cli.client`): `ledger` reads `GET /v1/ledger?by=`, `quota list` reads
`GET /v1/quotas` (any valid token); `quota grant` is `POST /v1/quotas`, which needs role operator
(not limited to a project) and records the caller and `--reason` in its `quota.granted` event.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()
errors = Console(stderr=True, soft_wrap=True)

DATE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S"]


def _utc(value: datetime) -> datetime:
    """A date or time from the command line: naive values are UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _number(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _print_json(rows: list[dict[str, Any]]) -> None:
    typer.echo(json.dumps(rows, indent=2, default=str))


def _ledger_table(rows: list[dict[str, Any]], key: str) -> Table:
    table = Table(title="cardflow ledger")
    for header in (key, "GPU-hours", "cost", "output units", "unit", "cost / unit"):
        table.add_column(header, justify="left" if header in {key, "unit"} else "right")
    for row in rows:
        label = row[key] + (f" ({row['name']})" if row.get("name") else "") + (" *" if row.get("running") else "")
        table.add_row(
            label, _number(row["gpu_hours"], 3), _number(row["cost"]), _number(row["output_units"], 0),
            row["output_unit"] or "", _number(row["cost_per_output_unit"], 6),
        )  # fmt: skip
    return table


def _quota_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="quota accounts")
    for header in ("account", "project", "card", "GPU-hours", "used", "remaining", "used %", "valid", "alerts"):
        table.add_column(header, justify="right" if header in {"GPU-hours", "used", "remaining", "used %"} else "left")
    for row in rows:
        table.add_row(
            row["account_id"], row["project"], row["card_type"] or "any", _number(row["gpu_hours"]),
            _number(row["used_gpu_hours"]), _number(row["remaining_gpu_hours"]), f"{row['used_share']:.1%}",
            f"{row['valid_from'][:10]} → {row['valid_to'][:10]}", ", ".join(row["alerts_raised"]),
        )  # fmt: skip
    return table


class By(StrEnum):
    """`--by`: what the ledger totals over (mirrors `services.ledger.reports.Grouping`)."""

    TASK = "task"
    PROJECT = "project"
    CARD = "card"


def register(app: typer.Typer) -> None:
    @app.command("ledger")
    def ledger(
        by: Annotated[By, typer.Option("--by", help="total per task, project or card type")] = By.TASK,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON rows instead of a table")] = False,
    ) -> None:
        """GPU-hours, cost, output units and cost per output unit (* = a lease still running)."""
        with cli_api() as api:
            rows = api.get("/v1/ledger", by=by.value)
        if as_json:
            _print_json(rows)
        else:
            console.print(_ledger_table(rows, {"task": "task_id", "project": "project", "card": "card_type"}[by.value]))

    quota = typer.Typer(help="Quota accounts: grant GPU-hours to a project, list accounts and their use.")
    app.add_typer(quota, name="quota")

    @quota.command("grant")
    def grant(
        project: Annotated[str, typer.Argument(help="project id, as in submissions")],
        gpu_hours: Annotated[float, typer.Option("--gpu-hours", help="GPU-hours granted")],
        valid_from: Annotated[datetime, typer.Option("--valid-from", formats=DATE_FORMATS, help="start (UTC if no zone)")],
        valid_to: Annotated[datetime, typer.Option("--valid-to", formats=DATE_FORMATS, help="end (UTC if no zone)")],
        reason: Annotated[str, typer.Option("--reason", help="why; recorded in the quota.granted event")],
        alert_days: Annotated[float, typer.Option("--alert-days", help="warn this many days before the end")] = 15.0,
        card_type: Annotated[str | None, typer.Option("--card-type", help="only this card type")] = None,
    ) -> None:
        """Grant a quota account (operator): writes it and its quota.granted event."""
        body = {"project": project, "gpu_hours": gpu_hours, "valid_from": _utc(valid_from).isoformat(),
                "valid_to": _utc(valid_to).isoformat(), "alert_lead_days": alert_days, "card_type": card_type,
                "reason": reason}  # fmt: skip
        with cli_api() as api:
            granted = api.post("/v1/quotas", body)
        console.print(f"granted {gpu_hours:g} GPU-hours to {project}: account {granted['account_id']}")

    @quota.command("list")
    def list_quotas(
        as_json: Annotated[bool, typer.Option("--json", help="print JSON rows instead of a table")] = False,
    ) -> None:
        """Every quota account: used and remaining GPU-hours, validity, alerts raised."""
        with cli_api() as api:
            rows = api.get("/v1/quotas")
        if as_json:
            _print_json(rows)
        else:
            console.print(_quota_table(rows))
