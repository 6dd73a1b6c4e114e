"""This installation's own recent workload, read from its tables, as `config what-if` replays it.

For the tasks submitted in the last N days (intake.tasks: arrival and the resolved submission):

- readiness time: the first `task.readiness_changed` after which the task no longer waited for
  data (views.events), else the submission time;
- real run: the seconds its leases held GPUs (dispatcher.leases, granted to ended or now; a
  preempted and resumed task counts every run) and the card type of its last lease; a task that
  never ran has none (the replay uses its estimate);
- the fleet: every node that registered (dispatcher.nodes).

Tasks cancelled before they ever ran are left out (they never used a GPU).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from shared.events import utcnow

_TABLES = ("intake.tasks", "dispatcher.leases", "dispatcher.nodes", "dispatcher.tasks")


async def load_workload(pool: asyncpg.Pool, days: float) -> dict[str, Any]:
    """`{"since", "until", "tasks": [...], "nodes": [...]}` (empty lists before the services first ran)."""
    until = utcnow()
    since = until - timedelta(days=days)
    async with pool.acquire() as conn:
        if not all([await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table) for table in _TABLES]):
            return {"since": since.isoformat(), "until": until.isoformat(), "tasks": [], "nodes": []}
        tasks = await _tasks(conn, since, until)
        nodes = await conn.fetch("SELECT node_id, card_type, gpus FROM dispatcher.nodes ORDER BY node_id")
    return {"since": since.isoformat(), "until": until.isoformat(), "tasks": tasks,
            "nodes": [dict(row) for row in nodes]}  # fmt: skip


async def _tasks(conn: asyncpg.Connection, since: datetime, until: datetime) -> list[dict[str, Any]]:
    views = await conn.fetchval("SELECT to_regclass('views.events') IS NOT NULL")
    ready = (
        "(SELECT min(e.occurred_at) FROM views.events AS e WHERE e.task_id = t.task_id"
        " AND e.type = 'task.readiness_changed' AND e.reason <> 'data_not_ready')"
        if views else "NULL::timestamptz"
    )
    rows = await conn.fetch(
        f"SELECT t.task_id, t.submitted_at, t.submission, {ready} AS ready_at, d.state,"
        " (SELECT sum(extract(epoch FROM coalesce(l.ended_at, $2) - l.granted_at)) FROM dispatcher.leases AS l"
        "  WHERE l.task_id = t.task_id) AS run_s,"
        " (SELECT l.card_type FROM dispatcher.leases AS l WHERE l.task_id = t.task_id"
        "  ORDER BY l.granted_at DESC LIMIT 1) AS ran_card"
        " FROM intake.tasks AS t LEFT JOIN dispatcher.tasks AS d ON d.task_id = t.task_id"
        " WHERE t.submitted_at >= $1 AND t.submitted_at <= $2 ORDER BY t.submitted_at, t.task_id",
        since, until,
    )  # fmt: skip
    return [_task(row) for row in rows if not (row["state"] == "cancelled" and row["run_s"] is None)]


def _task(row: asyncpg.Record) -> dict[str, Any]:
    submission = row["submission"]
    card_types = submission.get("card_types") or {}
    checkpoint = submission.get("checkpoint") or {}
    return {
        "task_id": row["task_id"], "submitted_at": row["submitted_at"].isoformat(),
        "ready_at": row["ready_at"].isoformat() if row["ready_at"] else None,
        "project": submission["project"], "priority_class": submission["priority_class"],
        "priority": submission.get("priority", 0), "gpus": submission["gpus"],
        "estimate_gpu_hours": submission["estimate_gpu_hours"], "profile": submission["profile"],
        "min_vram_gb": submission.get("min_vram_gb") or 0.0, "allow": card_types.get("allow") or [],
        "deny": card_types.get("deny") or [], "heavy": bool(submission.get("heavy")),
        "checkpoint_interval_s": checkpoint["interval_minutes"] * 60.0 if checkpoint else None,
        "run_s": float(row["run_s"]) if row["run_s"] is not None else None, "ran_card": row["ran_card"],
        "state": row["state"],
    }  # fmt: skip
