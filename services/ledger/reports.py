"""Ledger reports as plain rows: totals per task, project or card type, and quota accounts.

Rows are dicts of JSON-ready values (numbers as floats, times as ISO strings), so the CLI prints them
as a table or as JSON without knowing the schema.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

import asyncpg

from services.ledger.quotas import load_quota_status

SCHEMA = "ledger"


class Grouping(StrEnum):
    """What `cardflow ledger --by` totals over."""

    TASK = "task"
    PROJECT = "project"
    CARD = "card"


_QUERIES = {
    Grouping.TASK: (
        f"SELECT task_id, name, project, leases, gpu_hours, cost, output_units, output_unit, running, idle_gpu_hours"
        f" FROM {SCHEMA}.task_totals ORDER BY cost DESC, task_id"
    ),
    Grouping.PROJECT: (
        f"SELECT project, tasks, gpu_hours, cost, output_units, output_unit, idle_gpu_hours"
        f" FROM {SCHEMA}.project_totals ORDER BY cost DESC, project"
    ),
    Grouping.CARD: (
        f"SELECT card_type, leases, gpu_hours, cost, output_units, output_unit"
        f" FROM {SCHEMA}.card_totals ORDER BY cost DESC, card_type"
    ),
}


async def ledger_rows(conn: asyncpg.Connection | asyncpg.Pool, by: Grouping) -> list[dict[str, Any]]:
    """Totals by `by`, most expensive first, each with its cost per output unit (None without output)."""
    rows = []
    for record in await conn.fetch(_QUERIES[by]):
        row = {key: _plain(value) for key, value in dict(record).items()}
        units = row["output_units"] or 0.0
        row["cost_per_output_unit"] = row["cost"] / units if units > 0 else None
        rows.append(row)
    return rows


async def quota_rows(conn: asyncpg.Connection | asyncpg.Pool) -> list[dict[str, Any]]:
    """Every quota account with used and remaining GPU-hours, the alerts already raised, who changed it last."""
    raised: dict[str, list[str]] = {}
    for record in await conn.fetch(f"SELECT account_id, kind, threshold FROM {SCHEMA}.quota_alerts ORDER BY raised_at"):
        label = "expiring" if record["kind"] == "expiring" else f"{record['threshold']:.0%}"
        raised.setdefault(record["account_id"], []).append(label)
    return [
        {
            "account_id": status.account_id,
            "project": status.project,
            "card_type": status.card_type,
            "gpu_hours": float(status.gpu_hours),
            "used_gpu_hours": float(status.used_gpu_hours),
            "remaining_gpu_hours": float(status.remaining_gpu_hours),
            "used_share": status.used_share,
            "valid_from": status.valid_from.isoformat(),
            "valid_to": status.valid_to.isoformat(),
            "alert_lead_days": status.alert_lead_days,
            "alerts_raised": raised.get(status.account_id, []),
            "changed_by": status.changed_by,
            "changed_at": status.changed_at.isoformat() if status.changed_at else None,
        }
        for status in await load_quota_status(conn)
    ]


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value
