"""The live read models `cardflow audit verify` compares the replayed archive with (read only).

- tasks: the views service's `views.tasks` (the console's projection), and per task the history
  `views.events` (each applied event and the state it left), to name the first event that differs;
- leases: the dispatcher's `dispatcher.leases` (its system of record for grants and ends);
- ledger: `ledger.lease_usage` (totals per lease) and `ledger.usage_increments` (one row per
  `usage.recorded`, by the id of the event that says it and the lease: a `usage.batch_recorded` says
  one slice per lease);
- quotas: `ledger.quotas` with their used GPU-hours (`services.ledger.quotas.load_quota_status`).

A schema that does not exist yet (its service never ran) reads as empty, and `missing` says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from services.ledger.quotas import QuotaStatus, load_quota_status

_MISSING = (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError)


@dataclass(frozen=True, slots=True)
class LiveLease:
    lease_id: str
    task_id: str
    node_id: str
    card_type: str
    gpu_indices: tuple[int, ...]
    fencing_token: int
    granted_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    borrowed_headroom: bool = False


@dataclass(frozen=True, slots=True)
class LiveLeaseUsage:
    lease_id: str
    task_id: str
    project: str
    card_type: str
    gpu_seconds: Decimal
    cost: Decimal
    closed_at: datetime | None
    close_reason: str | None


@dataclass(frozen=True, slots=True)
class LiveIncrement:
    event_id: str
    lease_id: str
    gpu_seconds: Decimal
    cost: Decimal


@dataclass
class LiveState:
    """What the services hold now."""

    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    task_history: dict[str, dict[str, str]] = field(default_factory=dict)
    leases: dict[str, LiveLease] = field(default_factory=dict)
    lease_usage: dict[str, LiveLeaseUsage] = field(default_factory=dict)
    increments: dict[tuple[str, str], LiveIncrement] = field(default_factory=dict)
    """By (event id, lease id)."""
    quotas: dict[str, QuotaStatus] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


async def load_live(pool: asyncpg.Pool) -> LiveState:
    """Every live model, each read in one statement (they may be a moment apart: verify re-checks)."""
    live = LiveState()
    readers = (
        ("views.tasks", _tasks), ("views.events", _history), ("dispatcher.leases", _leases),
        ("ledger.lease_usage", _lease_usage), ("ledger.usage_increments", _increments), ("ledger.quotas", _quotas),
    )  # fmt: skip
    for name, read in readers:
        try:
            await read(pool, live)
        except _MISSING:
            live.missing.append(name)
    return live


async def _tasks(pool: asyncpg.Pool, live: LiveState) -> None:
    for row in await pool.fetch("SELECT id, view FROM views.tasks"):
        live.tasks[row["id"]] = row["view"]


async def _history(pool: asyncpg.Pool, live: LiveState) -> None:
    for row in await pool.fetch("SELECT task_id, event_id, state FROM views.events"):
        live.task_history.setdefault(row["task_id"], {})[row["event_id"]] = row["state"]


async def _leases(pool: asyncpg.Pool, live: LiveState) -> None:
    rows = await pool.fetch(
        "SELECT lease_id, task_id, node_id, card_type, gpu_indices, fencing_token, granted_at, ended_at, end_reason,"
        " borrowed_headroom"
        " FROM dispatcher.leases"
    )
    for row in rows:
        live.leases[row["lease_id"]] = LiveLease(**{**dict(row), "gpu_indices": tuple(row["gpu_indices"])})


async def _lease_usage(pool: asyncpg.Pool, live: LiveState) -> None:
    rows = await pool.fetch(
        "SELECT lease_id, task_id, project, card_type, gpu_seconds, cost, closed_at, close_reason FROM ledger.lease_usage"
    )
    for row in rows:
        live.lease_usage[row["lease_id"]] = LiveLeaseUsage(**dict(row))


async def _increments(pool: asyncpg.Pool, live: LiveState) -> None:
    for row in await pool.fetch("SELECT event_id, lease_id, gpu_seconds, cost FROM ledger.usage_increments"):
        live.increments[row["event_id"], row["lease_id"]] = LiveIncrement(**dict(row))


async def _quotas(pool: asyncpg.Pool, live: LiveState) -> None:
    for status in await load_quota_status(pool):
        live.quotas[status.account_id] = status
