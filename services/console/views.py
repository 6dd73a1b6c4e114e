"""Reads of the console's read models (`views` schema): tasks, a task's history, the fleet.

Used by the HTTP API, `cardflow tasks/status` and other services' tools. The views are
eventually consistent: a task submitted a moment ago may not be projected yet (None / absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from services.console.store import SCHEMA
from shared.events.states import TaskState
from shared.task_view import TaskView

DEFAULT_LIMIT = 200


class HistoryEntry(BaseModel):
    """One event applied to a task, and what the task showed after it."""

    model_config = ConfigDict(frozen=True)

    event_id: str
    type: str
    occurred_at: datetime
    actor: str
    state: TaskState
    reason: str
    detail: str
    facts: dict[str, str] | None = Field(None, exclude=True)
    """The values the reason's Chinese sentence is filled from (None on lines stored before they were kept)."""


class LeaseView(BaseModel):
    model_config = ConfigDict(frozen=True)

    lease_id: str
    task_id: str
    gpu_indices: tuple[int, ...]
    granted_at: datetime | None


class NodeView(BaseModel):
    """A node of the fleet with the leases in force on it."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    agent_id: str
    card_type: str
    gpus: int
    mode: str
    alive: bool
    registered_at: datetime
    lost_at: datetime | None
    detail: str
    gpus_leased: int
    leases: tuple[LeaseView, ...]


class CardTypeTotals(BaseModel):
    model_config = ConfigDict(frozen=True)

    card_type: str
    nodes: int
    gpus: int
    gpus_leased: int


class Fleet(BaseModel):
    model_config = ConfigDict(frozen=True)

    nodes: tuple[NodeView, ...]
    card_types: tuple[CardTypeTotals, ...]


MISSING_TABLES = (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError)
"""What a read raises before the owning service created its schema (read as "nothing yet")."""


async def views_exist(pool: asyncpg.Pool) -> bool:
    """True once the views service (or the console) created the views tables in this database."""
    return bool(await pool.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{SCHEMA}.tasks"))


async def load_task(pool: asyncpg.Pool, task_id: str) -> TaskView | None:
    """The task's view, or None when no event about it has been projected (yet)."""
    return await _one_view(pool, f"SELECT view FROM {SCHEMA}.tasks WHERE id = $1", task_id)


async def load_task_names(pool: asyncpg.Pool, task_ids: set[str]) -> dict[str, str]:
    """Task names by id from the views (a banner line links a task by its name)."""
    rows = await pool.fetch(f"SELECT id, name FROM {SCHEMA}.tasks WHERE id = ANY($1::text[])", sorted(task_ids))
    return {row["id"]: row["name"] for row in rows if row["name"]}


async def find_task_by_idempotency_key(pool: asyncpg.Pool, key: str) -> TaskView | None:
    """The task submitted with this key; if only rejected attempts used it, the latest of them."""
    return await _one_view(
        pool,
        f"SELECT view FROM {SCHEMA}.tasks WHERE idempotency_key = $1 ORDER BY state = 'rejected', id DESC LIMIT 1",
        key,
    )


async def _one_view(pool: asyncpg.Pool, sql: str, *args: object) -> TaskView | None:
    try:
        row = await pool.fetchrow(sql, *args)
    except MISSING_TABLES:
        return None  # nothing projected in this database yet
    return TaskView.model_validate(row["view"]) if row else None


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks `list_tasks` returns; None = any. `name` may hold `*` wildcards (`eval-*`);
    `submitted_since` keeps tasks submitted at or after it."""

    state: TaskState | None = None
    project: str | None = None
    priority_class: str | None = None
    name: str | None = None
    submitted_since: datetime | None = None

    def where(self) -> tuple[str, list[object]]:
        """The SQL condition (`true` when nothing is filtered) and its arguments, numbered from $1."""
        terms: list[str] = []
        args: list[object] = []

        def term(sql: str, value: object) -> None:
            args.append(value)
            terms.append(sql.replace("$?", f"${len(args)}"))

        if self.state is not None:
            term("state = $?", TaskState(self.state).value)
        if self.project is not None:
            term("project = $?", self.project)
        if self.priority_class is not None:
            term("view->>'priority_class' = $?", self.priority_class)
        if self.name is not None:
            pattern = self.name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace("*", "%")
            term("name LIKE $?", pattern)
        if self.submitted_since is not None:
            term("(view->>'submitted_at')::timestamptz >= $?", self.submitted_since)
        return (" AND ".join(terms) or "true"), args


async def list_tasks(
    pool: asyncpg.Pool, state: TaskState | str | None = None, limit: int = DEFAULT_LIMIT, where: TaskFilter | None = None
) -> list[TaskView]:
    """The most recently changed tasks, optionally only those in `state` and/or matching `where`
    ([] before any projection)."""
    where = where or TaskFilter()
    if state is not None:
        where = TaskFilter(TaskState(state), where.project, where.priority_class, where.name, where.submitted_since)
    condition, args = where.where()
    sql = f"SELECT view FROM {SCHEMA}.tasks WHERE {condition} ORDER BY updated_at DESC, id LIMIT ${len(args) + 1}"
    try:
        rows = await pool.fetch(sql, *args, limit)
    except MISSING_TABLES:
        return []
    return [TaskView.model_validate(row["view"]) for row in rows]


async def count_tasks_by_state(pool: asyncpg.Pool) -> dict[TaskState, int]:
    rows = await pool.fetch(f"SELECT state, count(*) AS n FROM {SCHEMA}.tasks GROUP BY state")
    return {TaskState(row["state"]): row["n"] for row in rows}


async def task_history(pool: asyncpg.Pool, task_id: str) -> list[HistoryEntry]:
    """The task's applied events, oldest first."""
    try:
        rows = await pool.fetch(
            f"SELECT event_id, type, occurred_at, actor, state, reason, detail, facts FROM {SCHEMA}.events"
            " WHERE task_id = $1 ORDER BY occurred_at, event_id",
            task_id,
        )
    except MISSING_TABLES:
        return []
    return [HistoryEntry(**dict(row)) for row in rows]


async def load_fleet(pool: asyncpg.Pool) -> Fleet:
    """Every node ever registered (alive first), its leases in force, and totals per card type."""
    nodes = await pool.fetch(f"SELECT * FROM {SCHEMA}.nodes ORDER BY alive DESC, card_type, node_id")
    leases = await pool.fetch(
        f"SELECT lease_id, task_id, node_id, gpu_indices, granted_at FROM {SCHEMA}.leases"
        " WHERE ended_at IS NULL ORDER BY granted_at, lease_id"
    )
    by_node: dict[str, list[LeaseView]] = {}
    for row in leases:
        lease = LeaseView(lease_id=row["lease_id"], task_id=row["task_id"], gpu_indices=tuple(row["gpu_indices"] or ()),
                          granted_at=row["granted_at"])
        by_node.setdefault(row["node_id"], []).append(lease)
    views = tuple(_node_view(dict(row), by_node.get(row["node_id"], [])) for row in nodes)
    return Fleet(nodes=views, card_types=_totals(views))


def _node_view(row: dict, leases: list[LeaseView]) -> NodeView:
    leased = len({index for lease in leases for index in lease.gpu_indices})
    return NodeView(**row, gpus_leased=leased, leases=tuple(leases))


def _totals(nodes: tuple[NodeView, ...]) -> tuple[CardTypeTotals, ...]:
    totals: dict[str, CardTypeTotals] = {}
    for node in nodes:
        if not node.alive:
            continue
        seen = totals.get(node.card_type, CardTypeTotals(card_type=node.card_type, nodes=0, gpus=0, gpus_leased=0))
        totals[node.card_type] = CardTypeTotals(
            card_type=node.card_type, nodes=seen.nodes + 1, gpus=seen.gpus + node.gpus,
            gpus_leased=seen.gpus_leased + node.gpus_leased,
        )
    return tuple(totals[card] for card in sorted(totals))
