"""`cardflow alerts [--since WHEN] [--json]`: the alert digest — every alert since then, with where it went.

An API client of `GET /v1/alerts/digest` (any token). `--since` takes `24h`, `7d`, `90m` or an ISO
date-time (UTC if it has no zone); the default is the last 24 hours. The table says, per alert, its
kind, when, what it is about, the sentence, and each webhook delivery (delivered, pending with
its attempts, or dead-lettered with the last error).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()
_RELATIVE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def since_moment(text: str, now: datetime) -> datetime:
    """`24h` / `7d` / `90m` before `now`, or an ISO date-time (UTC if naive)."""
    match = _RELATIVE.match(text.strip())
    if match:
        return now - timedelta(**{_UNITS[match["unit"]]: float(match["n"])})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected 24h, 7d, 90m or an ISO date-time such as 2026-12-01T08:00") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def register(app: typer.Typer) -> None:
    app.command("alerts")(alerts)


def alerts(
    since: Annotated[str, typer.Option("--since", help="24h, 7d, 90m or an ISO date-time")] = "24h",
    as_json: Annotated[bool, typer.Option("--json", help="print the digest as JSON")] = False,
) -> None:
    """The alert digest: every alert since then (quota, approvals, deadlines, idle reclaim, failures)."""
    start = since_moment(since, datetime.now(UTC))
    with cli_api() as api:
        digest = api.get("/v1/alerts/digest", since=start.isoformat())
    if as_json:
        print(json.dumps(digest, indent=2))
        return
    console.print(digest_table(digest))


def digest_table(digest: dict[str, Any]) -> Table:
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(digest["counts"].items())) or "none"
    table = Table(title=f"alerts since {digest['since'][:16]}: {digest['total']} ({counts})")
    for header in ("when", "kind", "about", "what", "webhooks"):
        table.add_column(header, overflow="fold")
    for alert in digest["alerts"]:
        about = alert["task_id"] or alert["account_id"] or ""
        if alert["project"]:
            about += f" ({alert['project']})"
        table.add_row(alert["occurred_at"][:19].replace("T", " "), alert["kind"], about, alert["sentence"],
                      "\n".join(_delivery(d) for d in alert["deliveries"]) or "—")
    return table


def _delivery(delivery: dict[str, Any]) -> str:
    status = delivery["status"]
    if status == "delivered":
        return f"✓ {delivery['url']}"
    tried = f"{delivery['attempts']} tries"
    return f"{'✗ dead' if status == 'dead' else '… pending'} {delivery['url']} ({tried}; {delivery['last_error'] or ''})"
