"""This installation's own recent workload, read from its tables, as `config what-if` replays it.

For the tasks submitted in the last N days (intake.tasks: arrival and the resolved submission):

- readiness time: since when the readiness service found every input ready
  (readiness.tasks.ready_since), else the submission time;
- real run: the seconds its leases held GPUs (dispatcher.leases, granted to ended or now; a
  preempted and resumed task counts every run) and the card type of its last lease; a task that
  never ran has none (the replay uses its estimate);
- the fleet: every node that registered (dispatcher.nodes).

Left out, and counted in `left_out`: tasks cancelled before they ever ran, tasks no card type
fits (unmatchable) and tasks whose data was not ready when the history was read, that never ran
(no policy could have started them).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from shared.events import utcnow

_TABLES = ("intake.tasks", "dispatcher.leases", "dispatcher.nodes", "dispatcher.tasks")


async def load_workload(pool: asyncpg.Pool, days: float) -> dict[str, Any]:
    """`{"since", "until", "tasks": [...], "nodes": [...], "left_out": {why: count}}` (empty before the
    services first ran)."""
    until = utcnow()
    since = until - timedelta(days=days)
    workload: dict[str, Any] = {"since": since.isoformat(), "until": until.isoformat(), "tasks": [], "nodes": [],
                                "left_out": {}}  # fmt: skip
    async with pool.acquire() as conn:
        if not all([await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table) for table in _TABLES]):
            return workload
        rows = await _task_rows(conn, since, until)
        nodes = await conn.fetch("SELECT node_id, card_type, gpus FROM dispatcher.nodes ORDER BY node_id")
    for row in rows:
        why = _left_out(row)
        if why is None:
            workload["tasks"].append(_task(row))
        else:
            workload["left_out"][why] = workload["left_out"].get(why, 0) + 1
    workload["nodes"] = [dict(row) for row in nodes]
    return workload


def _left_out(row: asyncpg.Record) -> str | None:
    """Why a task is not replayed (None: it is)."""
    if row["run_s"] is not None:
        return None
    if row["state"] == "cancelled":
        return "cancelled before it ran"
    if row["matched"] is False:
        return "unmatchable, never ran"
    if row["data_ready"] is not True:
        return "data not ready, never ran"
    return None


async def _task_rows(conn: asyncpg.Connection, since: datetime, until: datetime) -> list[asyncpg.Record]:
    readiness = await conn.fetchval("SELECT to_regclass('readiness.tasks') IS NOT NULL")
    ready = (
        "(SELECT r.ready_since FROM readiness.tasks AS r WHERE r.task_id = t.task_id AND r.ready)"
        if readiness else "NULL::timestamptz"
    )
    return await conn.fetch(
        f"SELECT t.task_id, t.submitted_at, t.submission, {ready} AS ready_at, d.state, d.data_ready, d.matched,"
        " (SELECT sum(extract(epoch FROM coalesce(l.ended_at, $2) - l.granted_at)) FROM dispatcher.leases AS l"
        "  WHERE l.task_id = t.task_id) AS run_s,"
        " (SELECT l.card_type FROM dispatcher.leases AS l WHERE l.task_id = t.task_id"
        "  ORDER BY l.granted_at DESC LIMIT 1) AS ran_card"
        " FROM intake.tasks AS t LEFT JOIN dispatcher.tasks AS d ON d.task_id = t.task_id"
        " WHERE t.submitted_at >= $1 AND t.submitted_at <= $2 ORDER BY t.submitted_at, t.task_id",
        since, until,
    )  # fmt: skip


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
