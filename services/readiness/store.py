"""Readiness's tables: tasks and their inputs, signalled datasets (SQL only, set-based).

Every function takes the caller's connection (and transaction); see `sql/001_readiness.sql`.

Tasks named by id, or reached from their inputs' keys, are found by the primary key alone: no such statement says
`closed_at IS NULL` in its WHERE, which would let the planner read the partial index of open tasks
(`tasks_open`) instead. On statistics taken while few tasks were open (a burst after a quiet spell; every
benchmark) it did, and compared every open task with every id of the batch: 20-145 ms a batch at 1,000
tasks/s, growing with the open tasks (docs/BENCHMARKS.md, Pipeline session 23). Whether a row is still
open is read beside it and decided here, or kept in the statement's SET.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from services.readiness.checks import (
    InputKind,
    InputState,
    Readiness,
    dataset_key,
    plan_input_check,
    plan_input_checks,
    ref_from_json,
    ref_to_json,
)
from shared.delivery.db import quote_schema
from shared.events import DataReadySignalled, TaskSubmitted
from shared.submission import DatasetRef


@dataclass(frozen=True, slots=True)
class TrackedTask:
    """A task locked for re-checking: what was last reported and its inputs."""

    task_id: str
    correlation_id: str
    submitted_event_id: str
    previous: Readiness | None
    inputs: list[InputState]


@dataclass(frozen=True, slots=True)
class InputUpdate:
    task_id: str
    position: int
    available: bool | None
    error: str | None
    probed: bool


@dataclass(frozen=True, slots=True)
class ReadinessUpdate:
    task_id: str
    readiness: Readiness


async def insert_submitted(conn: asyncpg.Connection, schema: str, events: Sequence[TaskSubmitted]) -> list[str]:
    """Start tracking the tasks of `events` (once each); return the task ids inserted now."""
    q = quote_schema(schema)
    rows = await conn.fetch(
        f"INSERT INTO {q}.tasks (task_id, name, project, priority_class, submitted_at, submitted_event_id,"
        " correlation_id, inputs_total) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],"
        " $5::timestamptz[], $6::text[], $7::text[], $8::int[]) ON CONFLICT (task_id) DO NOTHING RETURNING task_id",
        [e.data.task_id for e in events],
        [e.data.submission.name for e in events],
        [e.data.submission.project for e in events],
        [e.data.submission.priority_class.value for e in events],
        [e.occurred_at for e in events],
        [e.event_id for e in events],
        [e.correlation_id or e.event_id for e in events],
        [len(e.data.submission.inputs) for e in events],
    )
    inserted = {row["task_id"] for row in rows}
    checks = [(e.data.task_id, c) for e in events if e.data.task_id in inserted for c in plan_input_checks(e.data.submission.inputs)]
    if checks:
        await conn.execute(
            f"INSERT INTO {q}.inputs (task_id, position, ref, kind, key) SELECT t, p, r::jsonb, k, key"
            " FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]) AS u(t, p, r, k, key)",
            [task_id for task_id, _ in checks],
            [c.position for _, c in checks],
            [json.dumps(ref_to_json(c.ref)) for _, c in checks],
            [c.kind.value for _, c in checks],
            [c.key for _, c in checks],
        )
    return [e.data.task_id for e in events if e.data.task_id in inserted]


async def record_signals(conn: asyncpg.Connection, schema: str, events: Sequence[DataReadySignalled]) -> dict[str, str]:
    """Store signalled dataset versions; return the open tasks waiting on a signalled input, each
    mapped to the id of the (last) signal it waits on."""
    q = quote_schema(schema)
    datasets = [e for e in events if isinstance(e.data.input, DatasetRef)]
    if datasets:
        await conn.execute(
            f"INSERT INTO {q}.datasets (dataset, version, location, signalled_at, event_id)"
            " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[])"
            " ON CONFLICT (dataset, version) DO NOTHING",
            [e.data.input.dataset for e in datasets],
            [e.data.input.version for e in datasets],
            [e.data.location for e in datasets],
            [e.occurred_at for e in datasets],
            [e.event_id for e in datasets],
        )
    signal_by_key = {_signalled_key(e): e.event_id for e in events}
    rows = await conn.fetch(  # waiting inputs by key, their tasks by id (see the module docstring)
        f"SELECT i.task_id, i.key, t.closed_at IS NULL AS open FROM {q}.inputs i JOIN {q}.tasks t USING (task_id)"
        " WHERE i.key = ANY($1::text[]) AND i.available IS NOT TRUE",
        list(signal_by_key),
    )
    return {row["task_id"]: signal_by_key[row["key"]] for row in rows if row["open"]}


def _signalled_key(event: DataReadySignalled) -> str:
    ref = event.data.input
    if isinstance(ref, DatasetRef):
        return dataset_key(ref.dataset, ref.version)
    return plan_input_check(0, ref).key


async def close_tasks(conn: asyncpg.Connection, schema: str, closing: Mapping[str, str]) -> None:
    """Stop checking tasks that ended: task id -> the event type that ended it. A task closed already keeps
    its first closing (its row is rewritten unchanged); found by id alone (see the module docstring)."""
    if closing:
        await conn.execute(
            f"UPDATE {quote_schema(schema)}.tasks AS t"
            " SET closed_at = coalesce(t.closed_at, now()), closed_by = coalesce(t.closed_by, u.by)"
            " FROM unnest($1::text[], $2::text[]) AS u(task_id, by) WHERE t.task_id = u.task_id AND t.task_id = ANY($1::text[])",
            list(closing),
            list(closing.values()),
        )


async def lock_tracked(conn: asyncpg.Connection, schema: str, task_ids: Sequence[str]) -> list[TrackedTask]:
    """The open tasks among `task_ids`, row-locked in id order (so concurrent re-checks queue). Found by id
    alone (see the module docstring): a closed one is locked too and left out here."""
    q = quote_schema(schema)
    rows = await conn.fetch(
        f"SELECT task_id, correlation_id, submitted_event_id, ready, ready_fraction, missing::text, inputs_total,"
        f" closed_at IS NULL AS open FROM {q}.tasks WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE",
        list(task_ids),
    )
    tasks = [row for row in rows if row["open"]]
    with_inputs = [row["task_id"] for row in tasks if row["inputs_total"]]
    inputs = await conn.fetch(
        f"SELECT i.task_id, i.position, i.ref::text, i.kind, i.key, i.available, d.event_id AS signal_event_id"
        f" FROM {q}.inputs i LEFT JOIN {q}.datasets d ON i.kind = 'dataset'"
        " AND d.dataset = i.ref->>'dataset' AND d.version = i.ref->>'version'"
        " WHERE i.task_id = ANY($1::text[]) ORDER BY i.task_id, i.position",
        with_inputs,
    ) if with_inputs else []  # fmt: skip
    by_task: dict[str, list[InputState]] = {row["task_id"]: [] for row in tasks}
    for row in inputs:
        by_task[row["task_id"]].append(_input_state(row))
    return [
        TrackedTask(row["task_id"], row["correlation_id"], row["submitted_event_id"], _previous(row), by_task[row["task_id"]])
        for row in tasks
    ]


def _input_state(row: asyncpg.Record) -> InputState:
    return InputState(
        position=row["position"],
        ref=ref_from_json(json.loads(row["ref"])),
        kind=InputKind(row["kind"]),
        key=row["key"],
        available=row["available"],
        signal_event_id=row["signal_event_id"],
    )


def _previous(row: asyncpg.Record) -> Readiness | None:
    if row["ready"] is None:
        return None
    missing = tuple(ref_from_json(value) for value in json.loads(row["missing"]))
    return Readiness(ready=row["ready"], missing=missing, ready_fraction=row["ready_fraction"])


async def save_checks(
    conn: asyncpg.Connection,
    schema: str,
    inputs: Sequence[InputUpdate],
    readiness: Sequence[ReadinessUpdate],
    checked: Sequence[str],
) -> None:
    """Write input states, and per task in `checked` its check time and, if in `readiness`, its newly reported
    readiness — one statement for both (a task's row is rewritten once per check)."""
    q = quote_schema(schema)
    if inputs:
        await conn.execute(
            f"UPDATE {q}.inputs AS i SET available = u.available, last_error = u.error,"
            " checked_at = CASE WHEN u.probed THEN now() ELSE i.checked_at END"
            " FROM unnest($1::text[], $2::int[], $3::bool[], $4::text[], $5::bool[]) AS u(task_id, position, available, error, probed)"
            " WHERE i.task_id = u.task_id AND i.position = u.position",
            [u.task_id for u in inputs],
            [u.position for u in inputs],
            [u.available for u in inputs],
            [u.error for u in inputs],
            [u.probed for u in inputs],
        )
    reported = {u.task_id: u.readiness for u in readiness}
    if not reported.keys() <= set(checked):
        raise ValueError("a reported task must be among the checked ones")
    await conn.execute(  # one row version per checked task: its check time and, where reported, its readiness
        f"UPDATE {q}.tasks AS t SET checked_at = now(), ready = coalesce(u.ready, t.ready),"
        " ready_fraction = coalesce(u.fraction, t.ready_fraction), missing = coalesce(u.missing::jsonb, t.missing),"
        " ready_since = CASE WHEN u.ready IS NULL THEN t.ready_since WHEN u.ready THEN coalesce(t.ready_since, now()) END"
        " FROM unnest($1::text[], $2::bool[], $3::float8[], $4::text[]) AS u(task_id, ready, fraction, missing)"
        " WHERE t.task_id = u.task_id",
        list(checked),
        [reported[i].ready if i in reported else None for i in checked],
        [reported[i].ready_fraction if i in reported else None for i in checked],
        [json.dumps([ref_to_json(ref) for ref in reported[i].missing]) if i in reported else None for i in checked],
    )


async def probe_targets(conn: asyncpg.Connection | asyncpg.Pool, schema: str, task_ids: Sequence[str]) -> list[str]:
    """The distinct S3 keys (`s3://bucket/key`) still to probe for the open tasks among `task_ids`.

    Two lookups by primary key, not one join: on tables not analysed yet (a new installation, every
    benchmark) the join was planned as a scan of every open task, 0.6-15 ms a call, ~0.3 ms of
    PostgreSQL's CPU per task at 250 tasks/s (docs/BENCHMARKS.md, Pipeline session 10); and a batch
    whose tasks have no S3 input left to probe needs only the first."""
    q = quote_schema(schema)
    waiting = await conn.fetch(
        f"SELECT task_id, key FROM {q}.inputs WHERE task_id = ANY($1::text[]) AND kind <> 'dataset'"
        " AND available IS NOT TRUE",
        list(task_ids),
    )
    if not waiting:
        return []
    rows = await conn.fetch(
        f"SELECT task_id, closed_at IS NULL AS open FROM {q}.tasks WHERE task_id = ANY($1::text[])",
        list({row["task_id"] for row in waiting}),
    )
    open_ids = {row["task_id"] for row in rows if row["open"]}
    return list(dict.fromkeys(row["key"] for row in waiting if row["task_id"] in open_ids))


async def waiting_tasks(conn: asyncpg.Connection | asyncpg.Pool, schema: str, limit: int) -> list[str]:
    """Open tasks not (yet) ready, least recently checked first: what the sweep re-checks."""
    rows = await conn.fetch(
        f"SELECT task_id FROM {quote_schema(schema)}.tasks WHERE closed_at IS NULL AND ready IS NOT TRUE"
        " ORDER BY checked_at NULLS FIRST, task_id LIMIT $1",
        limit,
    )
    return [row["task_id"] for row in rows]

