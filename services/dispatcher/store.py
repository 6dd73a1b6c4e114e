"""Reads and writes of the dispatcher's tables: records in, records out, one statement per table.

- `load_*`: the leader's whole working state (at takeover, or after a gap), or the few tasks and
  leases a batch names that are not in it (final tasks, ended leases);
- `save_*`: what a fold changed, in the caller's transaction: the new records of a table in ONE
  upsert, the stored ones in ONE update of only the columns they changed (`row_writes`: `unnest` of one
  array per column); the events and commands built meanwhile (`built_meanwhile`), numbered, and
  appended in one insert.

The leader is the only writer of these tables (its epoch is checked first in every write
transaction), so the book a fold read holds the stored version of each record it changed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from services.dispatcher.row_writes import Column, Table, save_records
from services.dispatcher.working_set import WorkingSet
from shared.delivery.outbox import UnnumberedEvent, append_numbered, next_subject_seqs
from shared.delivery.db import quote_schema
from shared.events import new_event_id
from shared.events.emission import Emission
from shared.events.reasons import NodeMode, ReleaseReason, RevokeReason
from shared.events.states import TaskState
from shared.leasing.records import LeaseBook, LeaseRecord, LeaseState, NodeRecord, QuotaRecord, TaskRecord
from shared.leasing.report_fold import GpuReading, RejectedReport, ReportEffects
from shared.leasing.task_facets import EventEffects
from shared.leasing.watch import DEADLINE_FLAG
from shared.leasing.work import BookChanges
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.model import CardOption, DeferralReason, PriorityClass


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _enum(value: Any) -> str | None:
    return None if value is None else value.value


def _text_array(values: frozenset[str]) -> str:
    """A set of plain words as a PostgreSQL array literal (flags never hold quotes, commas or braces)."""
    return "{" + ",".join(sorted(values)) + "}"


TASK_COLUMNS: tuple[Column, ...] = (
    ("task_id", "text", lambda t: t.task_id), ("submitted", "bool", lambda t: t.submitted),
    ("project", "text", lambda t: t.project), ("priority_class", "text", lambda t: _enum(t.priority_class)),
    ("priority", "int", lambda t: t.priority), ("gpus", "int", lambda t: t.gpus), ("heavy", "bool", lambda t: t.heavy),
    ("checkpoint_interval_s", "float8", lambda t: t.checkpoint_interval_s),
    ("estimate_gpu_hours", "float8", lambda t: t.estimate_gpu_hours),
    ("submitted_at", "timestamptz", lambda t: t.submitted_at), ("command", "jsonb", lambda t: _json(t.command)),
    ("env", "jsonb", lambda t: _json(dict(t.env) if t.env is not None else None)), ("image", "text", lambda t: t.image),
    ("output_unit", "text", lambda t: t.output_unit), ("data_ready", "bool", lambda t: t.data_ready),
    ("readiness_seq", "int8", lambda t: t.readiness_seq), ("matched", "bool", lambda t: t.matched),
    ("options", "jsonb", lambda t: _json([[o.card_type, o.runtime_s, o.cost] for o in t.options]) if t.matched else None),
    ("match_seq", "int8", lambda t: t.match_seq), ("cancel_requested", "bool", lambda t: t.cancel_requested),
    ("cancel_reason", "text", lambda t: t.cancel_reason), ("state", "text", lambda t: t.state.value),
    ("run", "int", lambda t: t.run), ("resume_from", "text", lambda t: t.resume_from),
    ("queued_announced", "bool", lambda t: t.queued_announced),
    ("deferral_reason", "text", lambda t: _enum(t.deferral_reason)), ("deferral_detail", "text", lambda t: t.deferral_detail),
    ("updated_at", "timestamptz", lambda t: t.updated_at), ("submitted_by", "text", lambda t: t.submitted_by),
    ("approved_by", "text", lambda t: t.approved_by), ("reclaims", "int", lambda t: t.reclaims),
    ("labels", "jsonb", lambda t: _json(dict(t.labels) if t.labels is not None else None)),
    ("deadline", "timestamptz", lambda t: t.deadline), ("flags", "text[]", lambda t: _text_array(t.flags)),
)  # fmt: skip

LEASE_COLUMNS: tuple[Column, ...] = (
    ("lease_id", "text", lambda l: l.lease_id), ("task_id", "text", lambda l: l.task_id), ("run", "int", lambda l: l.run),
    ("parts", "int", lambda l: l.parts), ("node_id", "text", lambda l: l.node_id),
    ("agent_id", "text", lambda l: l.agent_id), ("card_type", "text", lambda l: l.card_type),
    ("gpu_indices", "int[]", lambda l: "{" + ",".join(map(str, l.gpu_indices)) + "}"),
    ("fencing_token", "int8", lambda l: l.fencing_token), ("granted_at", "timestamptz", lambda l: l.granted_at),
    ("ttl_s", "float8", lambda l: l.ttl_s), ("expires_at", "timestamptz", lambda l: l.expires_at),
    ("estimated_end", "timestamptz", lambda l: l.estimated_end), ("resume_from", "text", lambda l: l.resume_from),
    ("policy_version", "int", lambda l: l.policy_version),
    ("borrowed_headroom", "bool", lambda l: l.borrowed_headroom), ("state", "text", lambda l: l.state.value), ("started", "bool", lambda l: l.started),
    ("progress", "float8", lambda l: l.progress), ("output_units", "float8", lambda l: l.output_units),
    ("last_checkpoint", "text", lambda l: l.last_checkpoint),
    ("last_checkpoint_at", "timestamptz", lambda l: l.last_checkpoint_at),
    ("last_renewed_at", "timestamptz", lambda l: l.last_renewed_at),
    ("last_heard_at", "timestamptz", lambda l: l.last_heard_at),
    ("renewals_unreported", "int", lambda l: l.renewals_unreported),
    ("renewal_reported_at", "timestamptz", lambda l: l.renewal_reported_at),
    ("ended_at", "timestamptz", lambda l: l.ended_at), ("end_reason", "text", lambda l: _enum(l.end_reason)),
    ("preempting", "bool", lambda l: l.preempting), ("preempted_for", "text", lambda l: l.preempted_for),
    ("revoke_reason", "text", lambda l: _enum(l.revoke_reason)), ("util_pct_sum", "float8", lambda l: l.util_pct_sum),
    ("util_readings", "int", lambda l: l.util_readings), ("idle_gpu_seconds", "float8", lambda l: l.idle_gpu_seconds),
    ("idle_since", "timestamptz", lambda l: l.idle_since),
)  # fmt: skip
_LEASE_FIXED = frozenset({"lease_id", "task_id", "run", "parts", "node_id", "agent_id", "card_type", "gpu_indices",
                          "fencing_token", "granted_at", "ttl_s", "estimated_end", "resume_from", "policy_version",
                          "borrowed_headroom"})
LEASE_IN_MEMORY_ONLY = frozenset({"expires_at", "last_renewed_at", "last_heard_at", "renewals_unreported", "util_pct_sum",
                                  "util_readings", "idle_gpu_seconds", "idle_since"})
"""What a quiet renewal (`LeaseWork.renew`, `idle.observe`) changes without writing it, and a new leader's
TTL slack: a lease's stored row may lag its working-set version here, so every update of a lease writes them."""

NODE_COLUMNS: tuple[Column, ...] = (
    ("node_id", "text", lambda n: n.node_id), ("agent_id", "text", lambda n: n.agent_id),
    ("card_type", "text", lambda n: n.card_type), ("gpus", "int", lambda n: n.gpus),
    ("mode", "text", lambda n: n.mode.value), ("registered_at", "timestamptz", lambda n: n.registered_at),
    ("last_seen", "timestamptz", lambda n: n.last_seen), ("alive", "bool", lambda n: n.alive),
    ("time_scale", "float8", lambda n: n.time_scale),
    ("drained", "bool", lambda n: n.drained), ("drain_reason", "text", lambda n: n.drain_reason),
)  # fmt: skip


# ---- reading -------------------------------------------------------------------------------------


def task_record(row: Any) -> TaskRecord:
    return TaskRecord(
        task_id=row["task_id"], submitted=row["submitted"], project=row["project"],
        priority_class=PriorityClass(row["priority_class"]) if row["priority_class"] else None,
        priority=row["priority"], gpus=row["gpus"], heavy=row["heavy"], checkpoint_interval_s=row["checkpoint_interval_s"],
        estimate_gpu_hours=row["estimate_gpu_hours"], submitted_at=row["submitted_at"], command=row["command"],
        env=row["env"], image=row["image"], output_unit=row["output_unit"], data_ready=row["data_ready"],
        readiness_seq=row["readiness_seq"], matched=row["matched"],
        options=tuple(CardOption(c, float(r), float(k)) for c, r, k in row["options"] or ()),
        match_seq=row["match_seq"], cancel_requested=row["cancel_requested"], cancel_reason=row["cancel_reason"],
        state=TaskState(row["state"]), run=row["run"], resume_from=row["resume_from"],
        queued_announced=row["queued_announced"],
        deferral_reason=DeferralReason(row["deferral_reason"]) if row["deferral_reason"] else None,
        deferral_detail=row["deferral_detail"], updated_at=row["updated_at"], submitted_by=row["submitted_by"],
        approved_by=row["approved_by"], reclaims=row["reclaims"], labels=row["labels"], deadline=row["deadline"],
        flags=frozenset(row["flags"] or ()),
    )  # fmt: skip


def lease_record(row: Any) -> LeaseRecord:
    values = {name: row[name] for name, _, _ in LEASE_COLUMNS}
    return LeaseRecord(**values | {
        "gpu_indices": tuple(row["gpu_indices"]), "state": LeaseState(row["state"]),
        "end_reason": ReleaseReason(row["end_reason"]) if row["end_reason"] else None,
        "revoke_reason": RevokeReason(row["revoke_reason"]) if row["revoke_reason"] else None,
    })


def node_record(row: Any) -> NodeRecord:
    values = {name: row[name] for name, _, _ in NODE_COLUMNS}
    return NodeRecord(**values | {"mode": NodeMode(row["mode"])})


async def load_tasks(conn: asyncpg.Connection, schema: str, task_ids: Iterable[str]) -> dict[str, TaskRecord]:
    """These tasks' records (the ones that exist)."""
    ids = sorted(set(task_ids))
    if not ids:
        return {}
    rows = await conn.fetch(f"SELECT * FROM {quote_schema(schema)}.tasks WHERE task_id = ANY($1::text[])", ids)
    return {row["task_id"]: task_record(row) for row in rows}


async def load_leases(conn: asyncpg.Connection, schema: str, lease_ids: Iterable[str]) -> dict[str, LeaseRecord]:
    """These leases' records (the ones that exist)."""
    ids = sorted(set(lease_ids))
    if not ids:
        return {}
    rows = await conn.fetch(f"SELECT * FROM {quote_schema(schema)}.leases WHERE lease_id = ANY($1::text[])", ids)
    return {row["lease_id"]: lease_record(row) for row in rows}


async def load_everything(conn: asyncpg.Connection, schema: str, renewal_slack_s: float) -> WorkingSet:
    """The leader's working state: every node, active lease, open task, quota account and usage total.

    Renewals between two `lease.renewed` are not stored, so a stored `expires_at` may be up to
    `renewal_slack_s` early: each active lease gets that much back, and no lease whose agent kept
    renewing it expires because the leader changed.
    """
    s = quote_schema(schema)
    slack = timedelta(seconds=renewal_slack_s)
    leases = [lease_record(row) for row in await conn.fetch(f"SELECT * FROM {s}.leases WHERE state = 'active'")]
    tasks = await conn.fetch(
        f"SELECT * FROM {s}.tasks WHERE state IN ('queued', 'held', 'leased', 'running')"
        f" OR task_id IN (SELECT task_id FROM {s}.leases WHERE state = 'active')"
    )
    return WorkingSet(
        tasks={row["task_id"]: task_record(row) for row in tasks},
        leases={lease.lease_id: replace(lease, expires_at=lease.expires_at + slack) for lease in leases},
        nodes={row["node_id"]: node_record(row) for row in await conn.fetch(f"SELECT * FROM {s}.nodes")},
        accounts={row["account_id"]: QuotaRecord(**dict(row)) for row in await conn.fetch(
            f"SELECT {', '.join(_ACCOUNT_COLUMNS)} FROM {s}.quota_accounts")},
    )


async def fresh_leases(conn: asyncpg.Connection, schema: str, count: int) -> list[tuple[str, int]]:
    """`count` new (lease id, fencing token) pairs; tokens from the sequence (monotonic across leaders)."""
    if count == 0:
        return []
    tokens = await conn.fetch(f"SELECT nextval('{quote_schema(schema)}.fencing_tokens') AS t FROM generate_series(1, $1)",
                              count)
    return [(new_event_id(), row["t"]) for row in tokens]


# ---- writing -------------------------------------------------------------------------------------


def tables(schema: str) -> tuple[Table, Table, Table]:
    """The tasks, nodes and leases tables of `schema` as `row_writes` writes them."""
    s = quote_schema(schema)
    return (Table(f"{s}.tasks", "task_id", TASK_COLUMNS), Table(f"{s}.nodes", "node_id", NODE_COLUMNS),
            Table(f"{s}.leases", "lease_id", LEASE_COLUMNS, fixed=_LEASE_FIXED, always=LEASE_IN_MEMORY_ONLY))


async def save_changes(conn: asyncpg.Connection, schema: str, emitter: Emitter, changes: BookChanges,
                       stored: LeaseBook | None = None) -> None:
    """Write the changed records and append the events and commands (the caller's transaction).

    `stored`: the book the fold read (its records are the stored rows, `row_writes`): a record in it is
    updated in the columns that changed; others are upserted whole (and all of them without a book).
    The events are built while PostgreSQL writes the records and numbers them (`built_meanwhile`)."""
    subjects = [item.subject for item in changes.emissions]
    writing = asyncio.ensure_future(_write_records(conn, schema, changes, stored, emitter.schema, subjects))
    events = await built_meanwhile(writing, emitter, changes.emissions)
    await append_numbered(conn, emitter.schema, events, await writing)


async def built_meanwhile(writing: asyncio.Future[Any], emitter: Emitter, emissions: Sequence[Emission],
                          chunk: int = 16) -> list[UnnumberedEvent]:
    """The events of `emissions`, built (CPU) while `writing` runs on the connection: a chunk at a time,
    the event loop handing `writing`'s next statement to PostgreSQL between chunks. Should building
    fail, `writing` is cancelled and awaited before the error goes on."""
    built: list[UnnumberedEvent] = []
    try:
        for start in range(0, len(emissions), chunk):
            await asyncio.sleep(0)  # `writing` sends its next statement if the last one has returned
            built += emitter.build(emissions[start:start + chunk])
    except BaseException:
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)
        raise
    return built


async def _write_records(conn: asyncpg.Connection, schema: str, changes: BookChanges, stored: LeaseBook | None,
                         outbox_schema: str, subjects: list[str]) -> list[int]:
    """The records' statements (`save_changes`), then the subject sequence numbers of the events (their
    subjects in order, in `outbox_schema`'s counters)."""
    s = quote_schema(schema)
    tasks, nodes, leases_table = tables(schema)
    await save_records(conn, tasks, changes.tasks.values(), None if stored is None else stored.tasks)
    await save_records(conn, nodes, changes.nodes.values(), None if stored is None else stored.nodes)
    leases = list(changes.leases.values())
    await save_records(conn, leases_table, leases, None if stored is None else stored.leases)
    granted = [lease for lease in leases if lease.lease_id in changes.granted]
    if granted:
        gpus = [(lease.lease_id, lease.node_id, index) for lease in granted for index in lease.gpu_indices]
        await conn.execute(
            f"INSERT INTO {s}.lease_gpus (lease_id, node_id, gpu_index) SELECT * FROM unnest($1::text[], $2::text[], $3::int[])",
            [g[0] for g in gpus], [g[1] for g in gpus], [g[2] for g in gpus],
        )
    ended = sorted(lease.lease_id for lease in leases if not lease.active)
    if ended:
        await conn.execute(f"UPDATE {s}.lease_gpus SET active = false WHERE lease_id = ANY($1::text[]) AND active", ended)
    return await next_subject_seqs(conn, outbox_schema, subjects) if subjects else []


async def save_report_effects(conn: asyncpg.Connection, schema: str, emitter: Emitter, effects: ReportEffects,
                              stored: LeaseBook | None = None) -> None:
    """Everything a batch of reports changed: records, events and commands, rejected reports, utilisation
    (`stored`: the book the fold read, see `save_changes`)."""
    await save_changes(conn, schema, emitter, effects.changes, stored)
    await save_rejections(conn, schema, effects.rejected)
    await save_utilisation(conn, schema, effects.utilisation)


async def save_event_effects(conn: asyncpg.Connection, schema: str, emitter: Emitter, effects: EventEffects,
                             stored: LeaseBook | None = None) -> None:
    """Everything a batch of `cf:events` changed: records, events, quota accounts (with their usage)
    (`stored`: the book the fold read, see `save_changes`)."""
    await save_changes(conn, schema, emitter, effects.changes, stored)
    await save_accounts(conn, schema, effects.accounts.values())


_ACCOUNT_COLUMNS = ("account_id", "project", "gpu_hours", "card_type", "valid_from", "valid_to", "used_gpu_seconds",
                    "alert_lead_days")


async def save_accounts(conn: asyncpg.Connection, schema: str, accounts: Iterable[QuotaRecord]) -> None:
    """Quota accounts granted, adjusted, or that counted usage (one upsert)."""
    rows = list(accounts)
    if not rows:
        return
    names = ", ".join(_ACCOUNT_COLUMNS)
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.quota_accounts AS q ({names})"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[], $5::timestamptz[], $6::timestamptz[],"
        " $7::float8[], $8::float8[])"
        " ON CONFLICT (account_id) DO UPDATE SET "
        + ", ".join(f"{name} = excluded.{name}" for name in _ACCOUNT_COLUMNS[1:]),
        *[[getattr(a, name) for a in rows] for name in _ACCOUNT_COLUMNS],
    )


async def save_queue_estimates(conn: asyncpg.Connection, schema: str, estimates: Mapping[str, StartEstimate],
                               tasks: Mapping[str, TaskRecord], now: datetime) -> None:
    """Replace the queue's estimates (`dispatcher.queue_estimates`; the console and the CLI read them)."""
    s = quote_schema(schema)
    await conn.execute(f"DELETE FROM {s}.queue_estimates")
    rows = sorted(estimates.values(), key=lambda e: e.position)
    if not rows:
        return
    at = lambda epoch: None if epoch is None else datetime.fromtimestamp(epoch, UTC)  # noqa: E731
    at_risk = [e.task_id in tasks and DEADLINE_FLAG in tasks[e.task_id].flags for e in rows]
    await conn.execute(
        f"INSERT INTO {s}.queue_estimates (task_id, position, estimated_start, estimated_end, card_type, why_not,"
        " deadline_at_risk, estimated_at) SELECT *, $8::timestamptz FROM unnest($1::text[], $2::int[],"
        " $3::timestamptz[], $4::timestamptz[], $5::text[], $6::text[], $7::bool[])",
        [e.task_id for e in rows], [e.position for e in rows], [at(e.start_at) for e in rows],
        [at(e.end_at) for e in rows], [e.card_type for e in rows], [e.why_not for e in rows], at_risk, now,
    )  # fmt: skip


async def save_rejections(conn: asyncpg.Connection, schema: str, rejected: Sequence[RejectedReport]) -> None:
    """Record refused reports (`dispatcher.rejected_reports` is their log and their count)."""
    if not rejected:
        return
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.rejected_reports"
        " (report_id, report_type, agent_id, lease_id, fencing_token, reason, detail, count)"
        " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[],"
        " $8::int[])",
        [r.report_id for r in rejected], [r.report_type for r in rejected], [r.agent_id for r in rejected],
        [r.lease_id for r in rejected], [r.fencing_token for r in rejected],
        [r.refusal.reason.value for r in rejected], [r.refusal.detail for r in rejected], [r.count for r in rejected],
    )


async def save_utilisation(conn: asyncpg.Connection, schema: str, readings: Sequence[GpuReading]) -> None:
    """The last utilisation of each GPU that reported."""
    if not readings:
        return
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.gpu_utilisation AS g (node_id, gpu_index, util_pct, memory_used_gb,"
        " reported_at) SELECT * FROM unnest($1::text[], $2::int[], $3::float8[], $4::float8[], $5::timestamptz[])"
        " ON CONFLICT (node_id, gpu_index) DO UPDATE SET util_pct = excluded.util_pct,"
        " memory_used_gb = excluded.memory_used_gb, reported_at = excluded.reported_at",
        [r.node_id for r in readings], [r.gpu_index for r in readings], [r.util_pct for r in readings],
        [r.memory_used_gb for r in readings], [r.reported_at for r in readings],
    )
