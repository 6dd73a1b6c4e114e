"""Time series behind the console's plots, from the ledger's usage and the views' history (read-only).

    await utilisation_series(pool, now, hours=24)   # share of each card type's GPUs leased, per bucket
    await queue_series(pool, now, hours=24)         # tasks queued or held per priority class, per bucket
    await spend_series(pool, now, days=14)          # cost per project per UTC day

Each returns {"start", "end", "bucket_s", "times": [...], "series": {name: [values...]}}. A window
starts no earlier than the first recorded fact, so a system up for minutes shows minutes, split in
`BUCKETS` buckets.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from services.console.store import SCHEMA as VIEWS
from services.ledger.reports import SCHEMA as LEDGER
from services.console.views import MISSING_TABLES

BUCKETS = 48

_UTILISATION_SQL = f"""
WITH buckets AS (
    SELECT b AS from_at, b + $3::interval AS to_at
    FROM generate_series($1::timestamptz, $2::timestamptz - $3::interval, $3::interval) AS b
)
SELECT b.from_at, i.card_type,
       sum(i.gpus * extract(epoch FROM least(i.to_at, b.to_at) - greatest(i.from_at, b.from_at))) AS gpu_seconds
FROM buckets b JOIN {LEDGER}.usage_increments i ON i.from_at < b.to_at AND i.to_at > b.from_at
GROUP BY 1, 2
"""

_QUEUE_SQL = f"""
WITH spans AS (
    SELECT e.task_id, e.state, e.occurred_at AS from_at,
           lead(e.occurred_at) OVER (PARTITION BY e.task_id ORDER BY e.occurred_at, e.event_id) AS to_at
    FROM {VIEWS}.events e
), points AS (
    SELECT generate_series($1::timestamptz + $3::interval, $2::timestamptz, $3::interval) AS at
)
SELECT p.at, coalesce(t.view->>'priority_class', 'standard') AS priority_class, count(*) AS tasks
FROM points p
JOIN spans s ON s.from_at <= p.at AND (s.to_at IS NULL OR s.to_at > p.at) AND s.state IN ('queued', 'held')
JOIN {VIEWS}.tasks t ON t.id = s.task_id
GROUP BY 1, 2
"""

_SPEND_SQL = f"""
SELECT date_trunc('day', to_at AT TIME ZONE 'UTC')::date AS day, project, sum(cost) AS cost, sum(gpu_seconds) / 3600 AS gpu_hours
FROM {LEDGER}.usage_increments WHERE to_at >= $1 GROUP BY 1, 2 ORDER BY 1, 2
"""


def window(first: datetime | None, now: datetime, span: timedelta) -> tuple[datetime, datetime, timedelta]:
    """(start, end, bucket): the last `span` before `now`, cut to start at `first`; BUCKETS buckets."""
    start = now - span if first is None else max(now - span, first)
    bucket = max((now - start) / BUCKETS, timedelta(seconds=1))
    return now - bucket * BUCKETS, now, bucket


async def utilisation_series(pool: asyncpg.Pool, now: datetime, hours: float = 24) -> dict[str, Any]:
    """Per card type: leased GPU-seconds / registered GPUs' seconds in each bucket, as a share (0..1).

    The window ends at the last accounted usage (leases are accounted up to their last renewal), so
    the last bucket is not shown half-empty."""
    try:
        first, last = await pool.fetchrow(f"SELECT min(from_at), max(to_at) FROM {LEDGER}.usage_increments")
        start, end, bucket = window(first, min(now, last or now), timedelta(hours=hours))
        rows = await pool.fetch(_UTILISATION_SQL, start, end, bucket)
        capacity = dict(await pool.fetch(f"SELECT card_type, sum(gpus) FROM {VIEWS}.nodes WHERE alive GROUP BY 1"))
    except MISSING_TABLES:
        return _empty(now)
    times = _times(start, bucket)
    series = {card: [0.0] * BUCKETS for card in sorted({r["card_type"] for r in rows} | set(capacity))}
    for row in rows:
        gpus = capacity.get(row["card_type"]) or 0
        if gpus:
            series[row["card_type"]][_index(row["from_at"], start, bucket)] = float(row["gpu_seconds"]) / (gpus * bucket.total_seconds())
    return _result(start, end, bucket, times, series)


async def queue_series(pool: asyncpg.Pool, now: datetime, hours: float = 24) -> dict[str, Any]:
    """Per priority class: tasks queued or held at the end of each bucket."""
    try:
        first = await pool.fetchval(f"SELECT min(occurred_at) FROM {VIEWS}.events")
        start, end, bucket = window(first, now, timedelta(hours=hours))
        rows = await pool.fetch(_QUEUE_SQL, start, end, bucket)
    except MISSING_TABLES:
        return _empty(now)
    times = [start + bucket * (i + 1) for i in range(BUCKETS)]
    series = {cls: [0] * BUCKETS for cls in ("core", "standard", "opportunistic")}
    for row in rows:
        index = min(_index(row["at"], start + bucket, bucket), BUCKETS - 1)
        series.setdefault(row["priority_class"], [0] * BUCKETS)[index] = row["tasks"]
    return _result(start, end, bucket, times, series)


async def spend_series(pool: asyncpg.Pool, now: datetime, days: int = 14) -> dict[str, Any]:
    """Cost and GPU-hours per project per UTC day, the last `days` days that had usage."""
    try:
        rows = await pool.fetch(_SPEND_SQL, now - timedelta(days=days))
    except MISSING_TABLES:
        rows = []
    day_list = sorted({row["day"] for row in rows})
    series: dict[str, list[float]] = {}
    hours: dict[str, list[float]] = {}
    for row in rows:
        i = day_list.index(row["day"])
        series.setdefault(row["project"], [0.0] * len(day_list))[i] = float(row["cost"])
        hours.setdefault(row["project"], [0.0] * len(day_list))[i] = float(row["gpu_hours"])
    return {"days": [d.isoformat() for d in day_list], "series": series, "gpu_hours": hours}


def _times(start: datetime, bucket: timedelta) -> list[datetime]:
    return [start + bucket * i for i in range(BUCKETS)]


def _index(at: datetime, start: datetime, bucket: timedelta) -> int:
    return max(0, min(BUCKETS - 1, round((at - start) / bucket)))


def _result(start: datetime, end: datetime, bucket: timedelta, times: list[datetime], series: dict) -> dict[str, Any]:
    return {"start": start.isoformat(), "end": end.isoformat(), "bucket_s": bucket.total_seconds(),
            "times": [t.isoformat() for t in times], "series": series}  # fmt: skip


def _empty(now: datetime) -> dict[str, Any]:
    return {"start": now.isoformat(), "end": now.isoformat(), "bucket_s": 0, "times": [], "series": {}}


_PERIOD_SQL = f"""
WITH spent AS (
    SELECT project, sum(cost) AS cost, sum(gpu_seconds) / 3600 AS gpu_hours, count(DISTINCT task_id) AS tasks
    FROM {LEDGER}.usage_increments WHERE to_at > $1 GROUP BY project
), produced AS (
    SELECT t.project, sum(o.output_units) AS output_units,
           CASE WHEN count(DISTINCT t.output_unit) > 1 THEN 'mixed' ELSE min(t.output_unit) END AS output_unit
    FROM {LEDGER}.output_increments o JOIN {LEDGER}.tasks t USING (task_id)
    WHERE o.at > $1 GROUP BY t.project
)
SELECT coalesce(s.project, p.project) AS project, coalesce(s.tasks, 0) AS tasks, coalesce(s.gpu_hours, 0) AS gpu_hours,
       coalesce(s.cost, 0) AS cost, coalesce(p.output_units, 0) AS output_units, p.output_unit
FROM spent s FULL JOIN produced p USING (project)
ORDER BY cost DESC, project
"""


async def period_totals(pool: asyncpg.Pool, now: datetime, days: int) -> dict[str, Any]:
    """Per project over the last `days` days: GPU-hours and cost used in the window, and output
    counted in it — the rises of runs' reported output in the window (`ledger.output_increments`, as
    rounds and `cardflow ledger --since` count it: a run that checkpointed 500 before the window and
    ended at 1,000 in it adds 500; a flag in the window takes its run's counted output back)."""
    since = now - timedelta(days=days)
    try:
        rows = await pool.fetch(_PERIOD_SQL, since)
    except MISSING_TABLES:
        rows = []
    projects = []
    for row in rows:
        cost, units = float(row["cost"]), float(row["output_units"])
        projects.append({"project": row["project"], "tasks": row["tasks"], "gpu_hours": float(row["gpu_hours"]),
                         "cost": cost, "output_units": units, "output_unit": row["output_unit"],
                         "cost_per_output_unit": cost / units if units > 0 else None})  # fmt: skip
    total_cost = sum(p["cost"] for p in projects)
    return {"days": days, "since": since.isoformat(), "projects": projects, "total_cost": total_cost,
            "total_gpu_hours": sum(p["gpu_hours"] for p in projects)}  # fmt: skip


_BURN_SQL = f"""
WITH buckets AS (
    SELECT b AS at FROM generate_series($1::timestamptz + $3::interval, $2::timestamptz, $3::interval) AS b
)
SELECT q.account_id, b.at, q.gpu_hours,
       q.gpu_hours - coalesce((
           SELECT sum(i.gpus * extract(epoch FROM least(i.to_at, b.at, q.valid_to) - greatest(i.from_at, q.valid_from)))
           FROM {LEDGER}.usage_increments i
           WHERE i.project = q.project AND (q.card_type IS NULL OR i.card_type = q.card_type)
             AND i.from_at < least(b.at, q.valid_to) AND i.to_at > q.valid_from
       ), 0) / 3600 AS left_gpu_hours
FROM {LEDGER}.quotas q CROSS JOIN buckets b
WHERE q.valid_from < b.at AND q.valid_to + interval '1 day' > $1
ORDER BY q.account_id, b.at
"""


async def quota_burn_series(pool: asyncpg.Pool, now: datetime, days: float = 30) -> dict[str, Any]:
    """Per quota account in force: the share of its GPU-hours left at the end of each bucket (a
    burn-down; a share, so a 5-hour and a 100,000-hour account read on one axis). None before it starts."""
    try:
        first = await pool.fetchval(f"SELECT min(valid_from) FROM {LEDGER}.quotas WHERE valid_to > $1", now - timedelta(days=days))
        start, end, bucket = window(first, now, timedelta(days=days))
        rows = await pool.fetch(_BURN_SQL, start, end, bucket)
    except MISSING_TABLES:
        return _empty(now)
    times = [start + bucket * (i + 1) for i in range(BUCKETS)]
    series: dict[str, list[float | None]] = {}
    for row in rows:
        values = series.setdefault(row["account_id"], [None] * BUCKETS)
        share = max(float(row["left_gpu_hours"]) / float(row["gpu_hours"]), 0.0)
        values[min(_index(row["at"], start + bucket, bucket), BUCKETS - 1)] = share
    return _result(start, end, bucket, times, series)
