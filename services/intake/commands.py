"""Intake's commands: submit a task, request a cancellation, signal that data is ready.

The same code serves the `cf:ingest` stream handler (batch forms, one transaction per batch) and
the HTTP API in the console process (`submit_task`, `request_cancel`, one transaction each):

    outcome = await submit_task(pool, Emitter("intake", producer, actor), raw_body, actor)
    if outcome.problems: ...   # rejected: 422 with the problems (a task.rejected was emitted)
    elif not outcome.created: ...  # idempotency key seen before: outcome.task_id is the original

Every effect is an `intake` table row plus its event in the outbox, in the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from services.config.limits import load_submission_limits
from services.config.template_lookup import load_template_lookup
from shared.events.emission import Emission
from services.intake.ingest import DataReadyPayload
from services.intake.screening import (
    Accepted,
    Rejected,
    Repeated,
    Screened,
    SubmitRequest,
    retries_to_repin,
    screen,
    settle_stored_keys,
)
from shared.delivery.db import quote_schema
from shared.events import (
    DataReadySignalled,
    RejectionReason,
    TaskCancelRequested,
    TaskRejected,
    TaskSubmitted,
    new_event_id,
)
from shared.events.subjects import data_subject, task_subject
from shared.submission import Problem, SubmissionLimits, TaskSubmission
from shared.submission.limits import MAX_DEPTH
from shared.submission.storable import storable

HTTP_SOURCE = "http"
ProjectCheck = Callable[[str | None], object]
"""Raises when the caller may not submit for that project (see `submit_task`)."""


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """What a submission led to. `problems` is empty when it was valid; `created` is False when
    the idempotency key was seen before (then `task_id` is the original task) or when rejected.
    `conflict_with` names the task holding the key when the key was reused with another body."""

    task_id: str
    created: bool
    problems: list[Problem] = field(default_factory=list)
    conflict_with: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRequest:
    task_id: str
    actor: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class DataReadySignal:
    payload: DataReadyPayload
    actor: str


async def submit_task(
    pool: asyncpg.Pool, emitter: Emitter, raw: dict | bytes, actor: str, *, authorize: ProjectCheck | None = None
) -> SubmitOutcome:
    """Validate and store one submission (HTTP: the body's bytes, or a decoded object); see `SubmitOutcome`.

    `authorize(project)` is called with the project of the submission as resolved (its template
    applied) before anything is written; whatever it raises (the API's `PermissionDenied`) leaves
    no trace. `project` is None when the submission names none it could be validated with.
    """
    async with pool.acquire() as conn, conn.transaction():
        [outcome] = await submit_many(conn, emitter, [SubmitRequest(raw, actor, HTTP_SOURCE)], authorize=authorize)
    return outcome


async def request_cancel(
    pool: asyncpg.Pool, emitter: Emitter, task_id: str, actor: str, reason: str | None = None
) -> bool:
    """Emit `task.cancel_requested` for a known task; False when there is no such task (a
    rejected submission is not a task: there is nothing to cancel)."""
    async with pool.acquire() as conn, conn.transaction():
        [known] = await cancel_many(conn, emitter, [CancelRequest(task_id, actor, reason)])
    return known


async def load_task_project(pool: asyncpg.Pool, task_id: str, schema: str = "intake") -> str | None:
    """The project of a task intake accepted, None when there is no such task (for permission checks)."""
    return await pool.fetchval(f"SELECT project FROM {quote_schema(schema)}.tasks WHERE task_id = $1", task_id)


async def submit_many(
    conn: asyncpg.Connection, emitter: Emitter, requests: Sequence[SubmitRequest], *, authorize: ProjectCheck | None = None
) -> list[SubmitOutcome]:
    """Batch form of `submit_task` in the caller's transaction; one outcome per request, in order.

    1. look up the templates the batch names and the limits in force (the policy's `limits`);
       screen (pure): template applied, valid / repeated within the batch / rejected with every problem;
    2. insert the valid ones; a key already stored inserts nothing: with the same body it yields
       the stored id, with another body it is a conflict (`settle_stored_keys`, pure);
    3. store the rejections; 4. emit `task.submitted` / `task.rejected`, in request order.
    """
    templates = await load_template_lookup(conn, [request.raw for request in requests])
    limits = await load_submission_limits(conn)
    decisions = screen(requests, new_event_id, templates, limits)
    for decision in decisions if authorize is not None else ():
        authorize(project_of(decision))
    accepted = [d for d in decisions if isinstance(d, Accepted)]
    created, stored = await _insert_tasks(conn, emitter.schema, accepted)
    retries = await _retries_of_stored(conn, retries_to_repin(decisions, created, stored), stored, limits)
    decisions = settle_stored_keys(decisions, created, stored, new_event_id, same_as_stored=retries)
    rejections = [d for d in decisions if isinstance(d, Rejected)]
    await _insert_rejections(conn, emitter.schema, rejections)
    existing = {key: task_id for key, (task_id, _) in stored.items()}
    outcomes = [_outcome(d, created, existing) for d in decisions]
    emissions = [e for d in decisions if (e := _emission(d, created)) is not None]
    if emissions:
        await emitter.emit(conn, emissions)
    return outcomes


async def _retries_of_stored(
    conn: asyncpg.Connection, repin: dict[str, SubmitRequest], stored: dict[str, tuple[str, TaskSubmission]],
    limits: SubmissionLimits,
) -> frozenset[str]:  # fmt: skip
    """Of `repin` (task id -> request pinned to the stored task's template version), those that
    then resolve to exactly the stored submission: retries, not conflicts."""
    if not repin:
        return frozenset()
    lookup = await load_template_lookup(conn, [request.raw for request in repin.values()])
    again = screen(list(repin.values()), new_event_id, lookup, limits)
    return frozenset(
        task_id for task_id, decision in zip(repin, again, strict=True)
        if isinstance(decision, Accepted) and decision.own_key in stored and stored[decision.own_key][1] == decision.submission
    )  # fmt: skip


def project_of(decision: Screened) -> str | None:
    """The project a screened submission is for (its template applied); None if it names none."""
    if isinstance(decision, Rejected):
        return decision.project
    return (decision.first if isinstance(decision, Repeated) else decision).submission.project


async def cancel_many(conn: asyncpg.Connection, emitter: Emitter, requests: Sequence[CancelRequest]) -> list[bool]:
    """Batch form of `request_cancel`: True per request whose task exists (and was asked to cancel)."""
    ids = list({request.task_id for request in requests})
    rows = await conn.fetch(f"SELECT task_id FROM {quote_schema(emitter.schema)}.tasks WHERE task_id = ANY($1::text[])", ids)
    known = {row["task_id"] for row in rows}
    emissions = [
        Emission(
            TaskCancelRequested,
            subject=task_subject(request.task_id),
            data={"task_id": request.task_id, "reason": request.reason or ""},
            actor=request.actor,
        )
        for request in requests
        if request.task_id in known
    ]
    if emissions:
        await emitter.emit(conn, emissions)
    return [request.task_id in known for request in requests]


async def signal_data_ready_many(conn: asyncpg.Connection, emitter: Emitter, signals: Sequence[DataReadySignal]) -> None:
    """Emit one `data.ready_signalled` per signal (readiness re-checks the tasks waiting on it)."""
    emissions = [
        Emission(
            DataReadySignalled,
            subject=data_subject(signal.payload.input_ref()),
            data={
                "input": signal.payload.input_ref(),
                "location": signal.payload.location,
                "source": signal.payload.source,
            },
            actor=signal.actor,
        )
        for signal in signals
    ]
    if emissions:
        await emitter.emit(conn, emissions)


async def _insert_tasks(
    conn: asyncpg.Connection, schema: str, accepted: Sequence[Accepted]
) -> tuple[set[str], dict[str, tuple[str, TaskSubmission]]]:
    """Insert the accepted tasks; return the ids created now and, for keys stored before,
    key -> (task id, the submission stored with it)."""
    if not accepted:
        return set(), {}
    rows = await conn.fetch(
        f"INSERT INTO {quote_schema(schema)}.tasks (task_id, idempotency_key, name, project, template, submission, actor, source)"
        " SELECT t, k, n, p, tp, s::jsonb, a, src FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],"
        " $5::text[], $6::text[], $7::text[], $8::text[]) AS u(t, k, n, p, tp, s, a, src)"
        " ON CONFLICT (idempotency_key) DO NOTHING RETURNING task_id",
        [a.task_id for a in accepted],
        [a.own_key for a in accepted],
        [a.submission.name for a in accepted],
        [a.submission.project for a in accepted],
        [a.submission.template for a in accepted],
        [a.submission.model_dump_json() for a in accepted],
        [a.request.actor for a in accepted],
        [a.request.source for a in accepted],
    )
    created = {row["task_id"] for row in rows}
    repeated_keys = [a.own_key for a in accepted if a.task_id not in created and a.own_key is not None]
    stored = await conn.fetch(
        f"SELECT idempotency_key, task_id, submission FROM {quote_schema(schema)}.tasks WHERE idempotency_key = ANY($1::text[])",
        repeated_keys,
    ) if repeated_keys else []
    return created, {
        row["idempotency_key"]: (row["task_id"], TaskSubmission.model_validate(_json_value(row["submission"])))
        for row in stored
    }


def _json_value(value: Any) -> Any:
    """A jsonb column's value (the pool's codec decodes it; a plain connection gives text)."""
    return json.loads(value) if isinstance(value, str) else value


async def _insert_rejections(conn: asyncpg.Connection, schema: str, rejections: Sequence[Rejected]) -> None:
    if not rejections:
        return
    await conn.execute(
        f"INSERT INTO {quote_schema(schema)}.rejections (task_id, idempotency_key, name, project, raw, problems, actor, source)"
        " SELECT t, k, n, p, r::jsonb, pr::jsonb, a, src FROM unnest($1::text[], $2::text[], $3::text[],"
        " $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS u(t, k, n, p, r, pr, a, src)",
        [r.task_id for r in rejections],
        [r.idempotency_key for r in rejections],
        [r.name for r in rejections],
        [r.project for r in rejections],
        [stored_raw(r.request.raw) for r in rejections],
        [json.dumps([p.model_dump(mode="json") for p in r.problems]) for r in rejections],
        [r.request.actor for r in rejections],
        [r.request.source for r in rejections],
    )


def stored_raw(raw: Any) -> str:
    """The rejected body as jsonb text PostgreSQL accepts whatever it held (see `storable`)."""
    if isinstance(raw, bytes):
        raw = _decoded_or_text(raw)
    return json.dumps(storable(raw, max_depth=MAX_DEPTH), allow_nan=False)


def _decoded_or_text(body: bytes) -> Any:
    """An HTTP body as the JSON it holds, or as text when it holds none."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return body.decode("utf-8", errors="replace")


def _outcome(decision: Screened, created: set[str], existing: dict[str, str]) -> SubmitOutcome:
    if isinstance(decision, Rejected):
        return SubmitOutcome(decision.task_id, created=False, problems=decision.problems, conflict_with=decision.conflict_with)
    first = decision.first if isinstance(decision, Repeated) else decision
    if isinstance(decision, Accepted) and decision.task_id in created:
        return SubmitOutcome(decision.task_id, created=True)
    if first.task_id in created:
        return SubmitOutcome(first.task_id, created=False)
    return SubmitOutcome(existing[first.own_key or ""], created=False)


def _emission(decision: Screened, created: set[str]) -> Emission | None:
    if isinstance(decision, Rejected):
        return Emission(
            TaskRejected,
            subject=task_subject(decision.task_id),
            data={
                "task_id": decision.task_id,
                "idempotency_key": decision.idempotency_key,
                "name": decision.name,
                "project": decision.project,
                "reasons": [RejectionReason.from_problem(p) for p in decision.problems],
            },
            actor=decision.request.actor,
        )
    if isinstance(decision, Accepted) and decision.task_id in created:
        return Emission(
            TaskSubmitted,
            subject=task_subject(decision.task_id),
            data={"task_id": decision.task_id, "idempotency_key": decision.event_key, "submission": decision.submission},
            actor=decision.request.actor,
        )
    return None
