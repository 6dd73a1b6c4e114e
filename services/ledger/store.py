"""Reads and writes of the `ledger` schema for the event batches, one statement per table per batch."""

from __future__ import annotations

import json
from collections.abc import Iterable

import asyncpg

from services.common.bulk import column_arrays, execute_bulk
from services.common.runtime import Emitter
from services.ledger.accounting import LeaseAccount
from services.ledger.batch import BatchEffects, TaskInfo, TaskMatch
from shared.events.ledger import UNKNOWN_PROJECT
from services.ledger.capacity import AliveSpan, NodeSpanEffects
from services.ledger.outputs import ClearedFlag, FlaggedOutput, OutputEffects, OutputIncrement, OutputSnapshot, Run, RunOutput
from services.ledger.quotas import count_for_quotas_sql, lock_usage
from shared.events import UsageBatchRecorded

SCHEMA = "ledger"

_LEASE_COLUMNS = (
    "lease_id, task_id, project, card_type, gpus, price_per_gpu_hour, opened_at, accounted_until,"
    " gpu_seconds, cost, closed_at, close_reason, idle_gpu_seconds, util_gpu_seconds, busy_gpu_seconds, time_scale,"
    " last_checkpoint_at"
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


async def load_output_snapshot(conn: asyncpg.Connection, runs: Iterable[Run], cleared_tasks: Iterable[str]) -> OutputSnapshot:
    """The counted output of `runs` and of the flagged runs not cleared yet of `cleared_tasks` (whose
    held-back output it also returns), locked until the transaction ends (one writer per run), and the
    card types of their leases. A batch without output events reads nothing."""
    runs, cleared_tasks = set(runs), sorted(set(cleared_tasks))
    if not runs and not cleared_tasks:
        return OutputSnapshot()
    held = await conn.fetch(
        f"SELECT task_id, lease_id, output_units FROM {SCHEMA}.flagged_output WHERE task_id = ANY($1::text[])"
        " AND cleared_at IS NULL ORDER BY task_id, lease_id FOR UPDATE", cleared_tasks,
    )  # fmt: skip
    every = sorted(runs | {(row["task_id"], row["lease_id"]) for row in held})
    counted = await conn.fetch(
        f"SELECT o.task_id, o.lease_id, o.output_units, o.final, o.reported_at FROM {SCHEMA}.task_output o"
        " JOIN unnest($1::text[], $2::text[]) AS r(task_id, lease_id) USING (task_id, lease_id)"
        " ORDER BY o.task_id, o.lease_id FOR UPDATE OF o", [t for t, _ in every], [lease for _, lease in every],
    )  # fmt: skip
    cards = await conn.fetch(f"SELECT lease_id, card_type FROM {SCHEMA}.lease_usage WHERE lease_id = ANY($1::text[])",
                             sorted({lease for _, lease in every}))  # fmt: skip
    return OutputSnapshot(
        counted={(row["task_id"], row["lease_id"]): RunOutput(**dict(row)) for row in counted},
        held={(row["task_id"], row["lease_id"]): row["output_units"] for row in held},
        cards={row["lease_id"]: row["card_type"] for row in cards},
    )


_SPAN_FIELDS = ("node_id", "card_type", "gpus", "registered_at", "registered_event_id", "lost_at", "lost_event_id")
_SPAN_COLUMNS = ", ".join(_SPAN_FIELDS)


async def load_open_spans(conn: asyncpg.Connection, node_ids: Iterable[str]) -> dict[str, AliveSpan]:
    """The open alive spans of `node_ids`, by node id, locked until the transaction ends. A batch without
    node events reads nothing."""
    node_ids = sorted(set(node_ids))
    if not node_ids:
        return {}
    rows = await conn.fetch(
        f"SELECT {_SPAN_COLUMNS} FROM {SCHEMA}.node_spans WHERE node_id = ANY($1::text[]) AND lost_at IS NULL"
        " ORDER BY node_id FOR UPDATE", node_ids,
    )  # fmt: skip
    return {row["node_id"]: AliveSpan(**dict(row)) for row in rows}


async def save_effects(conn: asyncpg.Connection, emitter: Emitter, effects: BatchEffects) -> None:
    """Write tasks, leases, usage increments (each with the id of the usage.batch_recorded that carries its slice), the runs' output and its
    increments, the nodes' alive spans; append the events.

    A batch that records usage, or may move usage to a project (a task seen after its lease), first takes the
    usage lock (`quotas.lock_usage`): a quota grant or change counts the usage recorded before it, and
    announces it before any recorded after it; the accounts' running totals add it in the same statements."""
    if effects.increments or effects.tasks:
        await lock_usage(conn)
    await _save_tasks(conn, list(effects.tasks.values()))
    await _save_leases(conn, list(effects.leases.values()), effects.opened)
    events = await emitter.emit(conn, effects.emissions) if effects.emissions else []
    announced = {event.data.project: event.event_id for event in events if isinstance(event, UsageBatchRecorded)}
    await _save_increments(conn, effects, [announced[lease.project] for _, lease in effects.increments])
    await _save_outputs(conn, effects.output)
    await _save_flagged(conn, list(effects.output.flagged.values()))
    await _save_cleared(conn, effects.output.cleared)
    await _save_output_increments(conn, effects.output.increments)
    await _save_matches(conn, list(effects.matches.values()))
    await _save_node_spans(conn, effects.nodes)


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
    task_ids = [t.task_id for t in tasks]  # leases opened before their task was seen get its project
    await conn.execute(
        f"UPDATE {SCHEMA}.lease_usage AS u SET project = t.project FROM {SCHEMA}.tasks AS t"
        " WHERE u.project = $1 AND u.task_id = t.task_id AND t.task_id = ANY($2::text[])", UNKNOWN_PROJECT, task_ids,
    )  # fmt: skip
    await conn.execute(_MOVE_INCREMENTS_SQL, UNKNOWN_PROJECT, task_ids)


_MOVE_INCREMENTS_SQL = count_for_quotas_sql(
    f"moved AS (UPDATE {SCHEMA}.usage_increments AS u SET project = t.project FROM {SCHEMA}.tasks AS t"
    " WHERE u.project = $1 AND u.task_id = t.task_id AND t.task_id = ANY($2::text[])"
    " RETURNING u.project, u.card_type, u.gpus, u.from_at, u.to_at)",
    "counted AS (SELECT project, card_type, gpus, from_at, to_at, 1 AS sign FROM moved"
    " UNION ALL SELECT $1, card_type, gpus, from_at, to_at, -1 FROM moved)",
)
"""Increments of a task's leases recorded before the task was seen move from the unknown project to its own,
and the accounts' running totals with them (the unknown project's accounts, if any, give them back)."""


_LEASE_ROWS = (
    "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::numeric[],"
    " $7::timestamptz[], $8::timestamptz[], $9::numeric[], $10::numeric[], $11::timestamptz[], $12::text[],"
    " $13::numeric[], $14::numeric[], $15::numeric[], $16::float8[], $17::timestamptz[])"
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
        " util_gpu_seconds = EXCLUDED.util_gpu_seconds, busy_gpu_seconds = EXCLUDED.busy_gpu_seconds,"
        " last_checkpoint_at = EXCLUDED.last_checkpoint_at",
        [lease for lease in leases if lease.lease_id not in opened], _LEASE_FIELDS,
    )  # fmt: skip


async def _save_increments(conn: asyncpg.Connection, effects: BatchEffects, event_ids: list[str]) -> None:
    rows = effects.increments
    if not rows:
        return
    await conn.execute(
        INSERT_INCREMENTS_SQL,
        [i.lease_id for i, _ in rows], [i.from_at for i, _ in rows], [i.to_at for i, _ in rows],
        [lease.task_id for _, lease in rows], [lease.project for _, lease in rows],
        [lease.card_type for _, lease in rows], [lease.gpus for _, lease in rows],
        [i.gpu_seconds for i, _ in rows], [i.cost for i, _ in rows], event_ids, [i.idle_gpu_seconds for i, _ in rows],
    )  # fmt: skip


INSERT_INCREMENTS_SQL = count_for_quotas_sql(
    f"counted AS (INSERT INTO {SCHEMA}.usage_increments"
    " (lease_id, from_at, to_at, task_id, project, card_type, gpus, gpu_seconds, cost, event_id, idle_gpu_seconds)"
    " SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[],"
    " $6::text[], $7::int[], $8::numeric[], $9::numeric[], $10::text[], $11::numeric[])"
    " RETURNING project, card_type, gpus, from_at, to_at, 1 AS sign)"
)
"""The batch's increments, and what they count for each quota account (its running total), in one statement."""


class OutputWrittenConcurrentlyError(RuntimeError):
    """A run's output row this batch inserted was written by another transaction meanwhile (two deliveries
    at once): the batch rolls back, its entries stay pending, and redelivered it loads the row the other wrote."""


_OUTPUT_ROWS = "SELECT * FROM unnest($1::text[], $2::text[], $3::numeric[], $4::bool[], $5::timestamptz[])"
_OUTPUT_FIELDS = ("task_id", "lease_id", "output_units", "final", "reported_at")


async def _save_outputs(conn: asyncpg.Connection, output: OutputEffects) -> None:
    """The runs' counted output as the fold left it: rows of flagged runs go, loaded rows are updated,
    new ones inserted only where no row exists (else the batch fails, see the error)."""
    if output.uncounted:
        gone = sorted(output.uncounted)
        await conn.execute(
            f"DELETE FROM {SCHEMA}.task_output o USING unnest($1::text[], $2::text[]) AS f(task_id, lease_id)"
            " WHERE o.task_id = f.task_id AND o.lease_id = f.lease_id", [t for t, _ in gone], [lease for _, lease in gone],
        )  # fmt: skip
    fresh = [row for run, row in sorted(output.rows.items()) if run not in output.stored]
    if fresh:
        written = await conn.fetch(
            f"INSERT INTO {SCHEMA}.task_output (task_id, lease_id, output_units, final, reported_at) {_OUTPUT_ROWS}"
            " ON CONFLICT (task_id, lease_id) DO NOTHING RETURNING task_id, lease_id", *column_arrays(fresh, _OUTPUT_FIELDS),
        )  # fmt: skip
        if len(written) != len(fresh):
            missed = sorted({(r.task_id, r.lease_id) for r in fresh} - {(w["task_id"], w["lease_id"]) for w in written})
            raise OutputWrittenConcurrentlyError(f"run output written by another transaction meanwhile: {missed}")
    await execute_bulk(
        conn,
        f"UPDATE {SCHEMA}.task_output o SET output_units = r.output_units, final = r.final, reported_at = r.reported_at"
        f" FROM ({_OUTPUT_ROWS}) AS r(task_id, lease_id, output_units, final, reported_at)"
        " WHERE o.task_id = r.task_id AND o.lease_id = r.lease_id",
        [row for run, row in sorted(output.rows.items()) if run in output.stored], _OUTPUT_FIELDS,
    )  # fmt: skip


async def _save_flagged(conn: asyncpg.Connection, flagged: list[FlaggedOutput]) -> None:
    """Flagged runs, with the output they held back (their counted output and the success's own) and
    the refused claim; no total counts it (`_save_outputs` removed their counted rows)."""
    if not flagged:
        return
    await conn.executemany(
        f"INSERT INTO {SCHEMA}.flagged_output (task_id, lease_id, output_units, claimed_output_units, flags, detail,"
        " reported_at, event_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (task_id, lease_id) DO NOTHING",
        [(f.task_id, f.lease_id, f.output_units, f.claimed_output_units, list(f.flags), f.detail, f.reported_at,
          f.event_id) for f in flagged],
    )  # fmt: skip


async def _save_cleared(conn: asyncpg.Connection, cleared: list[ClearedFlag]) -> None:
    """Cleared flags: the runs the fold cleared (locked since `load_output_snapshot`, or flagged in this
    batch) are marked cleared; their output is already in `_save_outputs`' rows."""
    if not any(c.lease_ids for c in cleared):
        return
    await conn.executemany(
        f"UPDATE {SCHEMA}.flagged_output SET cleared_at = $3, cleared_by = $4, clear_reason = $5, clear_event_id = $6"
        " WHERE task_id = $1 AND lease_id = ANY($2::text[]) AND cleared_at IS NULL",
        [(c.task_id, list(c.lease_ids), c.cleared_at, c.cleared_by, c.reason, c.event_id) for c in cleared if c.lease_ids],
    )  # fmt: skip


async def _save_output_increments(conn: asyncpg.Connection, increments: list[OutputIncrement]) -> None:
    """Each change of a run's counted output; `round_id` stays NULL until a round's close counts it."""
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.output_increments (task_id, lease_id, card_type, output_units, at, cause, event_id)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::numeric[], $5::timestamptz[], $6::text[],"
        " $7::text[])",
        increments, ("task_id", "lease_id", "card_type", "output_units", "at", lambda i: i.cause.value, "event_id"),
    )  # fmt: skip


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


async def _save_node_spans(conn: asyncpg.Connection, nodes: NodeSpanEffects) -> None:
    """Close the loaded open spans the batch closed, then insert the new ones (a node lost and registered
    again in one batch: its old span is closed before its new one opens)."""
    await execute_bulk(
        conn,
        f"UPDATE {SCHEMA}.node_spans s SET lost_at = c.lost_at, lost_event_id = c.lost_event_id"
        " FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS c(node_id, lost_at, lost_event_id)"
        " WHERE s.node_id = c.node_id AND s.lost_at IS NULL",
        list(nodes.closed.values()), ("node_id", "lost_at", "lost_event_id"),
    )  # fmt: skip
    await execute_bulk(
        conn,
        f"INSERT INTO {SCHEMA}.node_spans ({_SPAN_COLUMNS}) SELECT * FROM unnest($1::text[], $2::text[], $3::int[],"
        " $4::timestamptz[], $5::text[], $6::timestamptz[], $7::text[])",
        list(nodes.inserted.values()), _SPAN_FIELDS,
    )  # fmt: skip
