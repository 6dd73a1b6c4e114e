"""Events the dispatcher consumes from `cf:events`: task facets, cancellations, quotas, usage.

Each service owns its facet of a task, and facets arrive in ANY order (readiness may be known
before the submission): every facet is an upsert of its own columns of `tasks`, so whichever
arrives first creates the row. Readiness and match facets carry their producer's `subject_seq`;
an older one never overwrites a newer one. A task enters the queue once its facets are complete
(the generated column `tasks.complete`).

One batch = one transaction: inbox records for the whole batch, one multi-row upsert per facet.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import asyncpg

from services.dispatcher.context import Dispatcher
from services.dispatcher.emitting import EventBatch
from services.dispatcher.leases import lock_leases, revoke
from shared.delivery.db import quote_schema
from shared.delivery.inbox import record_consumed_many
from shared.events import (
    Envelope,
    QuotaAdjusted,
    QuotaGranted,
    TaskCancelled,
    TaskCancelRequested,
    TaskMatched,
    TaskReadinessChanged,
    TaskSubmitted,
    TaskUnmatchable,
    UsageRecorded,
)
from shared.events.reasons import RevokeReason
from shared.events.subjects import task_subject

EVENTS_CONSUMER = "dispatcher:events"
RELEVANT = (
    TaskSubmitted, TaskReadinessChanged, TaskMatched, TaskUnmatchable, TaskCancelRequested,
    QuotaGranted, QuotaAdjusted, UsageRecorded,
)


async def handle_events(dc: Dispatcher, events: Sequence[Envelope]) -> None:
    """Apply the relevant events of a batch in one transaction; ignore the others."""
    relevant = [event for event in events if isinstance(event, RELEVANT)]
    if not relevant:
        return
    async with dc.writing() as conn:
        fresh = await record_consumed_many(conn, dc.schema, EVENTS_CONSUMER, [e.event_id for e in relevant])
        todo = list({e.event_id: e for e in relevant if e.event_id in fresh}.values())
        if not todo:
            return
        batch = dc.batch()
        of = _by_type(todo)
        await save_submissions(conn, dc.schema, of[TaskSubmitted])
        await save_readiness(conn, dc.schema, of[TaskReadinessChanged])
        await save_matches(conn, dc.schema, of[TaskMatched] + of[TaskUnmatchable])
        await save_quotas(conn, dc.schema, of[QuotaGranted] + of[QuotaAdjusted])
        await save_usage(conn, dc.schema, of[UsageRecorded])
        for request in of[TaskCancelRequested]:
            await cancel_task(conn, dc, batch, request)
        await batch.flush(conn)
    if any(not isinstance(event, UsageRecorded) for event in todo):
        dc.request_cycle()  # usage alone only lowers quotas: it can start nothing


def _by_type(events: Sequence[Envelope]) -> dict[type, list[Any]]:
    grouped: dict[type, list[Any]] = defaultdict(list)
    for event in events:
        grouped[type(event)].append(event)
    return grouped


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


async def save_submissions(conn: asyncpg.Connection, schema: str, events: Sequence[TaskSubmitted]) -> None:
    """The submission facet: project, class, priority, GPUs, heavy, checkpointing, estimate, command."""
    rows = {e.data.task_id: e for e in events}.values()
    if not rows:
        return
    subs = [e.data.submission for e in rows]
    columns = (
        [e.data.task_id for e in rows], [s.project for s in subs], [s.priority_class.value for s in subs],
        [s.priority for s in subs], [s.gpus for s in subs], [s.is_heavy for s in subs],
        [s.checkpoint.interval_minutes * 60.0 if s.checkpoint else None for s in subs],
        [s.estimate_gpu_hours for s in subs], [e.occurred_at for e in rows],
        [_json(list(s.command) if isinstance(s.command, tuple) else s.command) for s in subs],
        [_json(s.env) for s in subs], [s.image for s in subs], [s.output_unit for s in subs],
    )
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.tasks AS t (task_id, submitted, project, priority_class, priority, gpus,"
        " heavy, checkpoint_interval_s, estimate_gpu_hours, submitted_at, command, env, image, output_unit)"
        " SELECT id, true, p, c, pr, g, h, ck, est, at, cmd::jsonb, env::jsonb, img, unit FROM unnest($1::text[],"
        " $2::text[], $3::text[], $4::int[], $5::int[], $6::bool[], $7::float8[], $8::float8[], $9::timestamptz[],"
        " $10::text[], $11::text[], $12::text[], $13::text[]) AS r(id, p, c, pr, g, h, ck, est, at, cmd, env, img, unit)"
        " ON CONFLICT (task_id) DO UPDATE SET submitted = true, project = excluded.project,"
        " priority_class = excluded.priority_class, priority = excluded.priority, gpus = excluded.gpus,"
        " heavy = excluded.heavy, checkpoint_interval_s = excluded.checkpoint_interval_s,"
        " estimate_gpu_hours = excluded.estimate_gpu_hours, submitted_at = excluded.submitted_at,"
        " command = excluded.command, env = excluded.env, image = excluded.image, output_unit = excluded.output_unit"
        " WHERE NOT t.submitted",
        *columns,
    )


def _latest(events: Sequence[Envelope]) -> list[Any]:
    """Per task, only the event with the highest subject_seq (one upsert may touch a row once)."""
    latest: dict[str, Any] = {}
    for event in events:
        task_id = event.data.task_id
        if task_id not in latest or latest[task_id].subject_seq < event.subject_seq:
            latest[task_id] = event
    return list(latest.values())


async def save_readiness(conn: asyncpg.Connection, schema: str, events: Sequence[TaskReadinessChanged]) -> None:
    latest = _latest(events)
    if not latest:
        return
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.tasks AS t (task_id, data_ready, readiness_seq)"
        " SELECT * FROM unnest($1::text[], $2::bool[], $3::bigint[])"
        " ON CONFLICT (task_id) DO UPDATE SET data_ready = excluded.data_ready, readiness_seq = excluded.readiness_seq"
        " WHERE t.readiness_seq IS NULL OR t.readiness_seq < excluded.readiness_seq",
        [e.data.task_id for e in latest], [e.data.ready for e in latest], [e.subject_seq for e in latest],
    )


def card_options_of(event: TaskMatched | TaskUnmatchable) -> list[list[Any]] | None:
    """`task.matched` -> `[[card_type, runtime_s, cost], ...]`, the chosen card type first."""
    if not isinstance(event, TaskMatched):
        return None
    ranking = sorted(event.data.ranking, key=lambda option: option.card_type != event.data.chosen)
    return [[o.card_type, o.est_runtime_s, o.est_cost] for o in ranking]


async def save_matches(conn: asyncpg.Connection, schema: str, events: Sequence[TaskMatched | TaskUnmatchable]) -> None:
    latest = _latest(events)
    if not latest:
        return
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.tasks AS t (task_id, matched, options, match_seq)"
        " SELECT id, m, o::jsonb, seq FROM unnest($1::text[], $2::bool[], $3::text[], $4::bigint[]) AS r(id, m, o, seq)"
        " ON CONFLICT (task_id) DO UPDATE SET matched = excluded.matched, options = excluded.options,"
        " match_seq = excluded.match_seq WHERE t.match_seq IS NULL OR t.match_seq < excluded.match_seq",
        [e.data.task_id for e in latest], [isinstance(e, TaskMatched) for e in latest],
        [_json(card_options_of(e)) for e in latest], [e.subject_seq for e in latest],
    )


async def save_quotas(conn: asyncpg.Connection, schema: str, events: Sequence[QuotaGranted | QuotaAdjusted]) -> None:
    s = quote_schema(schema)
    for event in sorted(events, key=lambda e: (e.subject, e.subject_seq)):
        d = event.data
        if isinstance(event, QuotaGranted):
            await conn.execute(
                f"INSERT INTO {s}.quota_accounts (account_id, project, gpu_hours, card_type, valid_from, valid_to)"
                " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (account_id) DO UPDATE SET project = excluded.project,"
                " gpu_hours = excluded.gpu_hours, card_type = excluded.card_type, valid_from = excluded.valid_from,"
                " valid_to = excluded.valid_to",
                d.account_id, d.project, d.gpu_hours, d.card_type, d.valid_from, d.valid_to,
            )
        else:
            await conn.execute(
                f"UPDATE {s}.quota_accounts SET gpu_hours = gpu_hours + $2, valid_to = coalesce($3, valid_to)"
                " WHERE account_id = $1",
                d.account_id, d.delta_gpu_hours, d.valid_to,
            )


async def save_usage(conn: asyncpg.Connection, schema: str, events: Sequence[UsageRecorded]) -> None:
    """Recorded usage comes off the project's quota."""
    used: dict[str, float] = defaultdict(float)
    for event in events:
        used[event.data.project] += event.data.gpu_seconds
    if not used:
        return
    projects = sorted(used)
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.project_usage AS u (project, gpu_seconds)"
        " SELECT * FROM unnest($1::text[], $2::float8[])"
        " ON CONFLICT (project) DO UPDATE SET gpu_seconds = u.gpu_seconds + excluded.gpu_seconds",
        projects, [used[p] for p in projects],
    )


async def cancel_task(conn: asyncpg.Connection, dc: Dispatcher, batch: EventBatch, request: TaskCancelRequested) -> None:
    """Queued or held: cancelled now. Leased or running: revoke its leases; cancelled when they end.

    A request that arrives before the submission cancels the task as soon as it is known.
    """
    s, task_id, reason = quote_schema(dc.schema), request.data.task_id, request.data.reason
    state = await conn.fetchval(
        f"INSERT INTO {s}.tasks AS t (task_id, cancel_requested, cancel_reason) VALUES ($1, true, $2)"
        " ON CONFLICT (task_id) DO UPDATE SET cancel_requested = true, cancel_reason = excluded.cancel_reason"
        " RETURNING state",
        task_id, reason,
    )
    if state in ("queued", "held"):
        await conn.execute(f"UPDATE {s}.tasks SET state = 'cancelled', updated_at = now() WHERE task_id = $1", task_id)
        batch.add(TaskCancelled, subject=task_subject(task_id), cause=request, data={"task_id": task_id, "reason": reason})
    elif state in ("leased", "running"):
        leases = await lock_leases(conn, dc.schema, "l.task_id = $1 AND l.state = 'active'", task_id)
        detail = f"the task was cancelled{': ' + reason if reason else ''}"
        await revoke(conn, batch, leases, RevokeReason.CANCELLED, detail[:2000], grace_s=dc.config.revoke_grace_s,
                     cause=request)
