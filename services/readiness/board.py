"""The readiness board: which open tasks can run, and which wait on which data.

A read-only query over `readiness.tasks` for the console (any process with a pool):

    rows = await load_board(pool)
    blocked = [row for row in rows if not row.ready]   # row.missing_inputs says on what
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from services.readiness.checks import describe_ref, ref_from_json

READINESS_SCHEMA = "readiness"


@dataclass(frozen=True, slots=True)
class BoardRow:
    """One open task on the board. `ready` is None until its first check completed."""

    task_id: str
    name: str
    project: str
    priority_class: str
    ready: bool | None
    ready_fraction: float | None
    missing_inputs: tuple[str, ...]  # each as text: s3://bucket/key or dataset@version
    inputs_total: int
    submitted_at: datetime
    ready_since: datetime | None
    checked_at: datetime | None

    @property
    def status(self) -> str:
        """`ready`, `waiting` (on missing_inputs) or `checking` (first check not done)."""
        if self.ready is None:
            return "checking"
        return "ready" if self.ready else "waiting"


_BOARD_SQL = f"""
SELECT task_id, name, project, priority_class, ready, ready_fraction, missing::text AS missing,
       inputs_total, submitted_at, ready_since, checked_at
FROM {READINESS_SCHEMA}.tasks
WHERE closed_at IS NULL
ORDER BY ready IS TRUE, ready IS NOT NULL, submitted_at, task_id
LIMIT $1
"""


async def load_board(pool: asyncpg.Pool | asyncpg.Connection, *, limit: int = 1000) -> list[BoardRow]:
    """Open tasks: not yet checked and waiting ones first (oldest first), then the ready ones."""
    rows = await pool.fetch(_BOARD_SQL, limit)
    return [_board_row(row) for row in rows]


def _board_row(row: asyncpg.Record) -> BoardRow:
    missing = tuple(describe_ref(ref_from_json(value)) for value in json.loads(row["missing"]))
    return BoardRow(
        task_id=row["task_id"],
        name=row["name"],
        project=row["project"],
        priority_class=row["priority_class"],
        ready=row["ready"],
        ready_fraction=row["ready_fraction"],
        missing_inputs=missing,
        inputs_total=row["inputs_total"],
        submitted_at=row["submitted_at"],
        ready_since=row["ready_since"],
        checked_at=row["checked_at"],
    )
