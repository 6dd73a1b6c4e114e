"""The readiness board as data: open tasks grouped by what they wait for, and the last N days.

    board = await load_board_groups(pool, lang="zh")   # JSON-ready: counts, groups, entries
    days = await load_board_history(pool, days=7)       # waits for data by project and input, per day

Reads the views (`views.tasks`) and readiness's own table (`readiness.tasks`, `readiness.inputs`),
read-only; the grouping itself is pure (`services.console.blockers`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import asyncpg

from services.console.blockers import Board, BoardEntry, BlockerKind, group_board
from services.console.labels import Language
from services.console.sentences import needs_original, reason_sentence
from services.console.store import SCHEMA as VIEWS
from services.readiness.board import READINESS_SCHEMA
from shared.task_view import TaskView
from services.console.views import MISSING_TABLES

OPEN_LIMIT = 5000


async def load_open_views(pool: asyncpg.Pool, limit: int = OPEN_LIMIT) -> list[TaskView]:
    """Every task that is not finished (oldest change first), at most `limit`."""
    try:
        rows = await pool.fetch(
            f"SELECT view FROM {VIEWS}.tasks WHERE state NOT IN ('succeeded', 'failed', 'cancelled', 'rejected')"
            " ORDER BY updated_at, id LIMIT $1",
            limit,
        )
    except MISSING_TABLES:
        return []
    return [TaskView.model_validate(row["view"]) for row in rows]


async def load_queue_estimates(pool: asyncpg.Pool) -> dict[str, dict[str, Any]]:
    """The dispatcher's latest estimates of the queue (`dispatcher.queue_estimates`), by task id."""
    try:
        rows = await pool.fetch(
            "SELECT task_id, position, estimated_start, estimated_end, card_type, why_not, deadline_at_risk, estimated_at"
            " FROM dispatcher.queue_estimates"
        )
    except MISSING_TABLES:
        return {}
    return {row["task_id"]: {key: value.isoformat() if isinstance(value, datetime) else value
                             for key, value in dict(row).items()} for row in rows}


async def load_waiting_since(pool: asyncpg.Pool) -> dict[str, datetime]:
    """When readiness started checking each open task that is not ready (its submission time)."""
    try:
        rows = await pool.fetch(
            f"SELECT task_id, submitted_at FROM {READINESS_SCHEMA}.tasks WHERE closed_at IS NULL AND ready IS NOT TRUE"
        )
    except MISSING_TABLES:
        return {}
    return {row["task_id"]: row["submitted_at"] for row in rows}


async def load_board_groups(pool: asyncpg.Pool, lang: Language = "en") -> dict[str, Any]:
    """The board now, JSON-ready (see `board_json`)."""
    board = group_board(await load_open_views(pool), await load_waiting_since(pool))
    return board_json(board, lang)


def board_json(board: Board, lang: Language) -> dict[str, Any]:
    """{total, counts: {kind: n}, groups: [{kind, count, tasks: [...]}]} in `BlockerKind` order."""
    return {
        "total": board.total,
        "counts": {kind.value: board.counts.get(kind, 0) for kind in BlockerKind},
        "groups": [
            {"kind": kind.value, "count": len(entries), "tasks": [_entry_json(e, lang) for e in entries]}
            for kind, entries in board.groups.items()
        ],
    }


def _entry_json(entry: BoardEntry, lang: Language) -> dict[str, Any]:
    view = entry.view
    return {
        "id": view.id, "name": view.name, "project": view.project,
        "priority_class": view.priority_class.value if view.priority_class else None,
        "gpus": view.gpus, "card_type": view.card_type, "state": view.state.value, "reason": view.reason,
        "reason_detail": view.reason_detail, "sentence": reason_sentence(view, lang),
        "original_needed": needs_original(view, lang),
        "waiting_since": entry.waiting_since.isoformat() if entry.waiting_since else None,
        "inputs": [{"input": wait.input, "since": wait.since.isoformat()} for wait in entry.inputs],
    }  # fmt: skip


_HISTORY_SQL = f"""
WITH recent AS (
    SELECT task_id, project, submitted_at,
           extract(epoch FROM coalesce(ready_since, closed_at, $2) - submitted_at) AS wait_s,
           ready_since IS NULL AND closed_at IS NULL AS still_waiting,
           ready_since IS NULL AND closed_at IS NOT NULL AS closed_unready
    FROM {READINESS_SCHEMA}.tasks
    WHERE submitted_at >= $1
)
SELECT r.project, i.key AS input, count(*) AS tasks,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.wait_s) AS median_wait_s,
       max(r.wait_s) AS max_wait_s,
       count(*) FILTER (WHERE r.still_waiting) AS still_waiting,
       count(*) FILTER (WHERE r.closed_unready) AS ended_unready
FROM recent r JOIN {READINESS_SCHEMA}.inputs i USING (task_id)
GROUP BY r.project, i.key
ORDER BY max(r.wait_s) DESC, r.project, i.key
"""

_DAYS_SQL = f"""
SELECT date_trunc('day', submitted_at AT TIME ZONE 'UTC')::date AS day, count(*) AS tasks,
       count(*) FILTER (WHERE ready_since IS NULL AND closed_at IS NULL) AS still_waiting,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM coalesce(ready_since, closed_at, $2) - submitted_at))
           AS median_wait_s,
       max(extract(epoch FROM coalesce(ready_since, closed_at, $2) - submitted_at)) AS max_wait_s
FROM {READINESS_SCHEMA}.tasks
WHERE submitted_at >= $1
GROUP BY 1 ORDER BY 1 DESC
"""


async def load_board_history(pool: asyncpg.Pool, days: int, now: datetime) -> dict[str, Any]:
    """How long tasks submitted in the last `days` days waited for their data.

    A task waits from its submission until its last input is ready (`ready_since`); one still
    waiting counts up to `now`, one that ended unready up to its end. A task's wait is counted under
    each of its inputs (readiness records when the task became ready, not each input).
    """
    since = now - timedelta(days=days)
    try:
        by_input = await pool.fetch(_HISTORY_SQL, since, now)
        by_day = await pool.fetch(_DAYS_SQL, since, now)
    except MISSING_TABLES:
        by_input, by_day = [], []
    return {
        "days": days,
        "since": since.isoformat(),
        "by_input": [_plain(row) for row in by_input],
        "by_day": [{**_plain(row), "day": row["day"].isoformat()} for row in by_day],
    }


def _plain(row: asyncpg.Record) -> dict[str, Any]:
    return {key: float(value) if key.endswith("_s") and value is not None else value for key, value in dict(row).items()}
