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


_SHARE = "extract(epoch FROM least(i.to_at, $2) - greatest(i.from_at, $1)) / extract(epoch FROM i.to_at - i.from_at)"
_WINDOW = f"""
WITH used AS (
    SELECT i.task_id, i.project, i.card_type, i.lease_id, i.gpu_seconds * {_SHARE} AS gpu_seconds, i.cost * {_SHARE} AS cost
    FROM {SCHEMA}.usage_increments i WHERE i.to_at > $1 AND i.from_at < $2
), produced AS (
    SELECT o.task_id, o.lease_id, o.output_units FROM {SCHEMA}.output_increments o WHERE o.at >= $1 AND o.at < $2
)"""
_WINDOW_QUERIES = {
    Grouping.TASK: _WINDOW + f"""
SELECT k.task_id, t.name, coalesce(t.project, min(u.project)) AS project, t.output_unit,
       count(DISTINCT u.lease_id) AS leases, coalesce(sum(u.gpu_seconds), 0) / 3600 AS gpu_hours,
       coalesce(sum(u.cost), 0) AS cost, (SELECT coalesce(sum(p.output_units), 0) FROM produced p WHERE p.task_id = k.task_id)
       AS output_units, EXISTS (SELECT 1 FROM {SCHEMA}.lease_usage l WHERE l.task_id = k.task_id AND l.closed_at IS NULL) AS running
FROM (SELECT task_id FROM used UNION SELECT task_id FROM produced) k
LEFT JOIN used u USING (task_id) LEFT JOIN {SCHEMA}.tasks t USING (task_id)
GROUP BY k.task_id, t.name, t.project, t.output_unit ORDER BY cost DESC, k.task_id""",
    Grouping.PROJECT: _WINDOW + f"""
, spent AS (
    SELECT project, count(DISTINCT task_id) AS tasks, sum(gpu_seconds) / 3600 AS gpu_hours, sum(cost) AS cost FROM used GROUP BY project
), made AS (
    SELECT t.project, sum(p.output_units) AS output_units,
           CASE WHEN count(DISTINCT t.output_unit) > 1 THEN 'mixed' ELSE min(t.output_unit) END AS output_unit
    FROM produced p JOIN {SCHEMA}.tasks t USING (task_id) GROUP BY t.project
)
SELECT coalesce(s.project, m.project) AS project, coalesce(s.tasks, 0) AS tasks, coalesce(s.gpu_hours, 0) AS gpu_hours,
       coalesce(s.cost, 0) AS cost, coalesce(m.output_units, 0) AS output_units, m.output_unit
FROM spent s FULL JOIN made m USING (project) ORDER BY cost DESC, project""",
    Grouping.CARD: _WINDOW + f"""
SELECT u.card_type, count(DISTINCT u.lease_id) AS leases, sum(u.gpu_seconds) / 3600 AS gpu_hours, sum(u.cost) AS cost,
       coalesce((SELECT sum(p.output_units) FROM produced p JOIN {SCHEMA}.lease_usage l USING (lease_id)
                 WHERE l.card_type = u.card_type), 0) AS output_units,
       (SELECT CASE WHEN count(DISTINCT t.output_unit) > 1 THEN 'mixed' ELSE min(t.output_unit) END
        FROM {SCHEMA}.tasks t WHERE t.task_id IN (SELECT task_id FROM used v WHERE v.card_type = u.card_type)) AS output_unit
FROM used u GROUP BY u.card_type ORDER BY cost DESC, u.card_type""",
}


async def ledger_rows_between(conn: asyncpg.Connection | asyncpg.Pool, by: Grouping, since: datetime,
                              until: datetime) -> list[dict[str, Any]]:  # fmt: skip
    """Totals by `by` over [since, until): the part of each accounted interval inside the window
    (GPU-seconds and cost pro rata) and the output increments in it (what each run's checkpoints and end
    reported above what it had counted, less what a flag in it took back), most expensive first: adjacent
    windows add up."""
    rows = []
    for record in await conn.fetch(_WINDOW_QUERIES[by], since, until):
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
