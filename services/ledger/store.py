"""Reads and writes of the `ledger` schema for the event batches, one statement per table per batch."""

from __future__ import annotations

import json
from collections.abc import Iterable

import asyncpg

from services.common.bulk import column_arrays, execute_bulk
from services.common.runtime import Emitter
from services.ledger.accounting import LeaseAccount
from services.ledger.batch import UNKNOWN_PROJECT, BatchEffects, ClearedFlag, FlaggedOutput, RunOutput, TaskInfo, TaskMatch
from services.ledger.quotas import lock_usage

SCHEMA = "ledger"

_LEASE_COLUMNS = (
    "lease_id, task_id, project, card_type, gpus, price_per_gpu_hour, opened_at, accounted_until,"
    " gpu_seconds, cost, closed_at, close_reason, idle_gpu_seconds, util_gpu_seconds, busy_gpu_seconds, time_scale"
)
_LEASE_FIELDS = tuple(name.strip() for name in _LEASE_COLUMNS.split(","))


async def load_leases(conn: asyncpg.Connection, lease_ids: Iterable[str]) -> dict[str, LeaseAccount]:
    """The lease accounts of `lease_ids`, locked until the transaction ends (one writer per lease)."""
    rows = await conn.fetch(
        f"SELECT {_LEASE_COLUMNS} FROM {SCHEMA}.lease_usage WHERE lease_id = ANY($1::text[])"
        " ORDER BY lease_id FOR UPDATE",
        sorted(lease_ids),
    )
    return {row["lease_id"]: LeaseAccount(**dict(row)) for row in rows}


async def load_projects(conn: asyncpg.Connection, task_ids: Iterable[str]) -> dict[str, str]:
    rows = await conn.fetch(f"SELECT task_id, project FROM {SCHEMA}.tasks WHERE task_id = ANY($1::text[])", list(task_ids))
    return {row["task_id"]: row["project"] for row in rows}


async def save_effects(conn: asyncpg.Connection, emitter: Emitter, effects: BatchEffects) -> None:
    """Write tasks, leases, increments (with their usage.recorded ids) and outputs; append the events.

    A batch that records usage first takes the usage lock (`quotas.lock_usage`): a quota grant or
    change counts the usage recorded before it, and announces it before any recorded after it."""
    if effects.increments:
        await lock_usage(conn)
    await _save_tasks(conn, list(effects.tasks.values()))
    await _save_leases(conn, list(effects.leases.values()), effects.opened)
    events = await emitter.emit(conn, effects.emissions) if effects.emissions else []
    await _save_increments(conn, effects, [event.event_id for event in events])
    await _save_outputs(conn, list(effects.outputs.values()))
    await _save_flagged(conn, list(effects.flagged.values()))
    await _save_cleared(conn, effects.cleared)
    await _save_matches(conn, list(effects.matches.values()))


async def _save_tasks(conn: asyncpg.Connection, tasks: list[TaskInfo]) -> None:
    if not tasks:
        return
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.tasks (task_id, project, name, output_unit, submitted_at, scenario, profile, gpus)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::text[],"
        " $7::text[], $8::int[]) ON CONFLICT (task_id) DO NOTHING",
        tasks, ("task_id", "project", "name", "output_unit", "submitted_at", "scenario", "profile", "gpus"),
    )  # fmt: skip
    for table in ("lease_usage", "usage_increments"):  # leases opened before their task was seen
        await conn.execute(
            f"UPDATE {SCHEMA}.{table} AS u SET project = t.project FROM {SCHEMA}.tasks AS t"
            " WHERE u.project = $1 AND u.task_id = t.task_id AND t.task_id = ANY($2::text[])",
            UNKNOWN_PROJECT,
            [t.task_id for t in tasks],
        )


_LEASE_ROWS = (
    "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::numeric[],"
    " $7::timestamptz[], $8::timestamptz[], $9::numeric[], $10::numeric[], $11::timestamptz[], $12::text[],"
    " $13::numeric[], $14::numeric[], $15::numeric[], $16::float8[])"
)


class LeaseOpenedConcurrentlyError(RuntimeError):
    """A lease this batch opened was written by another transaction meanwhile (two deliveries at once):
    the batch rolls back, its entries stay pending, and redelivered it loads the row the other wrote."""


async def _save_leases(conn: asyncpg.Connection, leases: list[LeaseAccount], opened: set[str]) -> None:
    """Leases the batch opened are inserted only where no row exists (else the batch fails, see the
    error); the loaded ones, locked since `load_leases`, are updated."""
    fresh = [lease for lease in leases if lease.lease_id in opened]
    if fresh:
        written = await conn.fetch(
            f"INSERT INTO {SCHEMA}.lease_usage ({_LEASE_COLUMNS}) {_LEASE_ROWS}"
            " ON CONFLICT (lease_id) DO NOTHING RETURNING lease_id",
            *column_arrays(fresh, _LEASE_FIELDS),
        )
        if len(written) != len(fresh):
            missed = sorted({lease.lease_id for lease in fresh} - {row["lease_id"] for row in written})
            raise LeaseOpenedConcurrentlyError(f"leases opened by another transaction meanwhile: {missed}")
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.lease_usage ({_LEASE_COLUMNS}) {_LEASE_ROWS}"
        " ON CONFLICT (lease_id) DO UPDATE SET project = EXCLUDED.project, accounted_until = EXCLUDED.accounted_until,"
        " gpu_seconds = EXCLUDED.gpu_seconds, cost = EXCLUDED.cost, closed_at = EXCLUDED.closed_at,"
        " close_reason = EXCLUDED.close_reason, idle_gpu_seconds = EXCLUDED.idle_gpu_seconds,"
        " util_gpu_seconds = EXCLUDED.util_gpu_seconds, busy_gpu_seconds = EXCLUDED.busy_gpu_seconds",
        [lease for lease in leases if lease.lease_id not in opened], _LEASE_FIELDS,
    )  # fmt: skip


async def _save_increments(conn: asyncpg.Connection, effects: BatchEffects, event_ids: list[str]) -> None:
    rows = effects.increments
    if not rows:
        return
    await conn.execute(
        f"INSERT INTO {SCHEMA}.usage_increments"
        " (lease_id, from_at, to_at, task_id, project, card_type, gpus, gpu_seconds, cost, event_id, idle_gpu_seconds)"
        " SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[],"
        " $6::text[], $7::int[], $8::numeric[], $9::numeric[], $10::text[], $11::numeric[])",
        [i.lease_id for i, _ in rows], [i.from_at for i, _ in rows], [i.to_at for i, _ in rows],
        [lease.task_id for _, lease in rows], [lease.project for _, lease in rows],
        [lease.card_type for _, lease in rows], [lease.gpus for _, lease in rows],
        [i.gpu_seconds for i, _ in rows], [i.cost for i, _ in rows], event_ids, [i.idle_gpu_seconds for i, _ in rows],
    )  # fmt: skip


async def _save_outputs(conn: asyncpg.Connection, outputs: list[RunOutput]) -> None:
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.task_output AS o (task_id, lease_id, output_units, final, reported_at)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::numeric[], $4::bool[], $5::timestamptz[])"
        " ON CONFLICT (task_id, lease_id) DO UPDATE SET"
        " output_units = GREATEST(o.output_units, EXCLUDED.output_units), final = o.final OR EXCLUDED.final,"
        " reported_at = GREATEST(o.reported_at, EXCLUDED.reported_at)",
        outputs, ("task_id", "lease_id", "output_units", "final", "reported_at"),
    )  # fmt: skip


async def _save_flagged(conn: asyncpg.Connection, flagged: list[FlaggedOutput]) -> None:
    """Flagged runs: their output counted so far (earlier checkpoints) moves out of `task_output` into
    `flagged_output`, with the success's own output and claim; no total counts it any more."""
    if not flagged:
        return
    moved = await conn.fetch(
        f"DELETE FROM {SCHEMA}.task_output o USING unnest($1::text[], $2::text[]) AS f(task_id, lease_id)"
        " WHERE o.task_id = f.task_id AND o.lease_id = f.lease_id RETURNING o.task_id, o.lease_id, o.output_units",
        [f.task_id for f in flagged], [f.lease_id for f in flagged],
    )  # fmt: skip
    counted = {(row["task_id"], row["lease_id"]): row["output_units"] for row in moved}
    rows = []
    for f in flagged:
        units = [u for u in (f.output_units, counted.get((f.task_id, f.lease_id))) if u is not None]
        rows.append((f.task_id, f.lease_id, max(units) if units else None, f.claimed_output_units, list(f.flags),
                     f.detail, f.reported_at, f.event_id))
    await conn.executemany(
        f"INSERT INTO {SCHEMA}.flagged_output (task_id, lease_id, output_units, claimed_output_units, flags, detail,"
        " reported_at, event_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (task_id, lease_id) DO NOTHING",
        rows,
    )  # fmt: skip


async def _save_cleared(conn: asyncpg.Connection, cleared: list[ClearedFlag]) -> None:
    """Cleared flags: each of the task's flagged runs not cleared yet is marked cleared and its output
    (if it had any within the bound) becomes final counted output at the moment of clearing — once:
    a redelivered or repeated clear finds nothing left to move."""
    for clear in cleared:
        moved = await conn.fetch(
            f"UPDATE {SCHEMA}.flagged_output SET cleared_at = $2, cleared_by = $3, clear_reason = $4, clear_event_id = $5"
            " WHERE task_id = $1 AND cleared_at IS NULL RETURNING task_id, lease_id, output_units",
            clear.task_id, clear.cleared_at, clear.cleared_by, clear.reason, clear.event_id,
        )  # fmt: skip
        await _save_outputs(conn, [RunOutput(row["task_id"], row["lease_id"], row["output_units"], True, clear.cleared_at)
                                   for row in moved if row["output_units"] is not None])  # fmt: skip


async def _save_matches(conn: asyncpg.Connection, matches: list[TaskMatch]) -> None:
    """Each task's latest match, by (`matched_at`, `subject_seq`): an older or the same match, redelivered,
    writes nothing. One statement for the batch (`matches` holds one per task, so the upsert touches each
    row once)."""
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.task_matches AS m (task_id, chosen, ranking, oversized, reason, catalog_version,"
        " matched_at, event_id, subject_seq) SELECT t, c, r::jsonb, o, rs, cv, at, e, sq FROM unnest($1::text[],"
        " $2::text[], $3::text[], $4::bool[], $5::text[], $6::text[], $7::timestamptz[], $8::text[], $9::bigint[])"
        " AS u(t, c, r, o, rs, cv, at, e, sq)"
        " ON CONFLICT (task_id) DO UPDATE SET chosen = EXCLUDED.chosen, ranking = EXCLUDED.ranking,"
        " oversized = EXCLUDED.oversized, reason = EXCLUDED.reason, catalog_version = EXCLUDED.catalog_version,"
        " matched_at = EXCLUDED.matched_at, event_id = EXCLUDED.event_id, subject_seq = EXCLUDED.subject_seq"
        " WHERE (m.matched_at, m.subject_seq) < (EXCLUDED.matched_at, EXCLUDED.subject_seq)",
        matches, ("task_id", "chosen", _ranking_json, "oversized", "reason", "catalog_version", "matched_at", "event_id",
                  "subject_seq"),
    )  # fmt: skip


def _ranking_json(match: TaskMatch) -> str:
    return json.dumps(match.ranking, separators=(",", ":"), ensure_ascii=False)
