"""Lease lifecycle writes: end a lease (and move its task), revoke or preempt leases.

Every lease ends exactly once, here, with `lease.released` (and `lease.expired` before it when the
TTL ran out): the rows are locked FOR UPDATE and only an active lease can end. What the end does to
the task is decided by the pure `transitions.decide_lease_end`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.dispatcher.emitting import EventBatch
from services.dispatcher.transitions import EndingLease, LeaseEnd, TaskEffect, Trigger, decide_lease_end
from shared.delivery.db import quote_schema
from shared.events import (
    Envelope,
    LeaseExpired,
    LeaseReleased,
    LeaseRevoked,
    TaskCancelled,
    TaskFailed,
    TaskRequeued,
    TaskStarted,
    TaskSucceeded,
)
from shared.events.reasons import RevokeReason
from shared.events.reports import PreemptCommand, RevokeCommand
from shared.events.subjects import agent_subject, lease_subject, task_subject
from shared.names import agent_inbox

Row = Mapping[str, Any]

LEASE_COLUMNS = (
    "l.lease_id, l.task_id, l.run, l.parts, l.node_id, l.agent_id, l.card_type, l.gpu_indices, l.fencing_token,"
    " l.granted_at, l.state, l.started, l.preempting, l.revoke_reason, l.resume_from, l.last_renewed_at,"
    " t.run AS task_run, t.state AS task_state, t.cancel_requested, t.cancel_reason, t.resume_from AS task_resume_from"
)


async def lock_leases(conn: asyncpg.Connection, schema: str, where: str, *args: Any) -> list[asyncpg.Record]:
    """Leases (with their task's columns) matching `where`, locked with their tasks, in id order."""
    s = quote_schema(schema)
    return await conn.fetch(
        f"SELECT {LEASE_COLUMNS} FROM {s}.leases l JOIN {s}.tasks t USING (task_id)"
        f" WHERE {where} ORDER BY l.lease_id FOR UPDATE OF l, t",
        *args,
    )


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What the agent said about a finished run (FINISHED trigger only)."""

    exit_code: int | None = None
    output_units: float | None = None
    error: str | None = None


async def end_lease(
    conn: asyncpg.Connection, batch: EventBatch, lease: Row, trigger: Trigger,
    *, cause: Envelope | None = None, outcome: RunOutcome = RunOutcome(), revoke_grace_s: float = 30.0,
) -> LeaseEnd:
    """End one ACTIVE, locked lease: free its GPUs, emit its end, and move its task."""
    s = quote_schema(batch.schema)
    others = await conn.fetchval(
        f"SELECT count(*) FROM {s}.leases WHERE task_id = $1 AND run = $2 AND state = 'active' AND lease_id <> $3",
        lease["task_id"], lease["run"], lease["lease_id"],
    )
    decision = decide_lease_end(_ending(lease, others), trigger, outcome.exit_code, outcome.error)
    await conn.execute(
        f"UPDATE {s}.leases SET state = 'ended', ended_at = $2, end_reason = $3 WHERE lease_id = $1",
        lease["lease_id"], batch.now, decision.release.value,
    )
    await conn.execute(f"UPDATE {s}.lease_gpus SET active = false WHERE lease_id = $1", lease["lease_id"])
    _emit_lease_end(batch, lease, trigger, decision, cause)
    await _apply_task_effect(conn, batch, lease, decision, outcome, cause)
    if decision.revoke_other_parts and others:
        parts = await lock_leases(
            conn, batch.schema, "l.task_id = $1 AND l.run = $2 AND l.state = 'active'", lease["task_id"], lease["run"]
        )
        reason = RevokeReason.CANCELLED if decision.effect is TaskEffect.CANCEL else RevokeReason.SUPERSEDED
        await revoke(conn, batch, parts, reason, "another part of the task ended", grace_s=revoke_grace_s, cause=cause)
    return decision


def _ending(lease: Row, others: int) -> EndingLease:
    return EndingLease(
        preempting=lease["preempting"],
        revoke_reason=RevokeReason(lease["revoke_reason"]) if lease["revoke_reason"] else None,
        current_run=lease["run"] == lease["task_run"],
        task_state=lease["task_state"],
        cancel_requested=lease["cancel_requested"],
        other_parts_active=others,
    )


def _emit_lease_end(batch: EventBatch, lease: Row, trigger: Trigger, decision: LeaseEnd, cause: Envelope | None) -> None:
    subject = lease_subject(lease["lease_id"])
    if trigger is Trigger.EXPIRED:
        batch.add(LeaseExpired, subject=subject, cause=cause, data={
            "lease_id": lease["lease_id"], "task_id": lease["task_id"], "last_renewed_at": lease["last_renewed_at"],
        })
    batch.add(LeaseReleased, subject=subject, cause=cause, data={
        "lease_id": lease["lease_id"], "task_id": lease["task_id"], "node_id": lease["node_id"],
        "card_type": lease["card_type"], "gpus": len(lease["gpu_indices"]), "granted_at": lease["granted_at"],
        "ended_at": batch.now, "reason": decision.release,
    })


async def _apply_task_effect(
    conn: asyncpg.Connection, batch: EventBatch, lease: Row, decision: LeaseEnd, outcome: RunOutcome,
    cause: Envelope | None,
) -> None:
    effect, task_id, lease_id = decision.effect, lease["task_id"], lease["lease_id"]
    if effect is TaskEffect.NONE:
        return
    subject = task_subject(task_id)
    if effect is TaskEffect.SUCCEED:
        if lease["task_state"] == "leased":
            batch.add(TaskStarted, subject=subject, cause=cause, data=started_data(lease))
        batch.add(TaskSucceeded, subject=subject, cause=cause,
                  data={"task_id": task_id, "lease_id": lease_id, "output_units": outcome.output_units})
    elif effect is TaskEffect.FAIL:
        error = outcome.error or f"the task exited with code {outcome.exit_code}"
        batch.add(TaskFailed, subject=subject, cause=cause,
                  data={"task_id": task_id, "lease_id": lease_id, "error": error, "exit_code": outcome.exit_code})
    elif effect is TaskEffect.CANCEL:
        batch.add(TaskCancelled, subject=subject, cause=cause,
                  data={"task_id": task_id, "lease_id": lease_id, "reason": lease["cancel_reason"]})
    else:
        batch.add(TaskRequeued, subject=subject, cause=cause, data={
            "task_id": task_id, "lease_id": lease_id, "reason": decision.requeue_reason,
            "resume_from": lease["task_resume_from"], "detail": _REQUEUE_DETAIL[decision.requeue_reason],
        })
    await conn.execute(
        f"UPDATE {quote_schema(batch.schema)}.tasks SET state = $2, deferral_reason = NULL, deferral_detail = NULL,"
        " updated_at = now() WHERE task_id = $1",
        task_id, _NEW_STATE[effect],
    )


_NEW_STATE = {
    TaskEffect.SUCCEED: "succeeded", TaskEffect.FAIL: "failed", TaskEffect.CANCEL: "cancelled",
    TaskEffect.REQUEUE: "queued",
}
_REQUEUE_DETAIL = {
    "preempted": "the task checkpointed and yielded its GPUs to higher-class work",
    "lease_expired": "the agent did not renew the lease within its TTL",
    "reclaimed_idle": "its GPUs stayed idle too long",
    "agent_failed": "the agent lost the task (it restarted, or stopped it on the dispatcher's request)",
}


def started_data(lease: Row) -> dict[str, Any]:
    return {"task_id": lease["task_id"], "lease_id": lease["lease_id"], "node_id": lease["node_id"],
            "resumed_from": lease["resume_from"]}


async def revoke(
    conn: asyncpg.Connection, batch: EventBatch, leases: Iterable[Row], reason: RevokeReason, detail: str,
    *, grace_s: float, cause: Envelope | None = None,
) -> list[str]:
    """Ask the agents to stop these active leases (once per lease); the lease ends when they report."""
    ids = [lease["lease_id"] for lease in leases]
    rows = await conn.fetch(
        f"UPDATE {quote_schema(batch.schema)}.leases SET revoke_reason = $2"
        " WHERE lease_id = ANY($1::text[]) AND state = 'active' AND revoke_reason IS NULL AND NOT preempting"
        " RETURNING lease_id, task_id, agent_id, fencing_token",
        ids, reason.value,
    )
    for row in sorted(rows, key=lambda r: r["lease_id"]):
        order = _order(row) | {"reason": reason, "grace_s": grace_s, "detail": detail}
        batch.add(RevokeCommand, subject=agent_subject(row["agent_id"]), data=order, cause=cause,
                  stream=agent_inbox(row["agent_id"]))
        batch.add(LeaseRevoked, subject=lease_subject(row["lease_id"]), cause=cause,
                  data={"lease_id": row["lease_id"], "task_id": row["task_id"], "reason": reason, "detail": detail})
    return [row["lease_id"] for row in rows]


async def preempt(
    conn: asyncpg.Connection, batch: EventBatch, victims: Sequence[tuple[str, str, str]], grace_s: float
) -> list[str]:
    """Mark `(lease_id, for_task_id, detail)` victims preempting; order each agent to checkpoint and yield."""
    rows = await conn.fetch(
        f"UPDATE {quote_schema(batch.schema)}.leases AS l SET preempting = true, preempted_for = v.for_task"
        " FROM unnest($1::text[], $2::text[]) AS v(lease_id, for_task)"
        " WHERE l.lease_id = v.lease_id AND l.state = 'active' AND NOT l.preempting AND l.revoke_reason IS NULL"
        " RETURNING l.lease_id, l.task_id, l.agent_id, l.fencing_token",
        [v[0] for v in victims], [v[1] for v in victims],
    )
    details = {lease_id: detail for lease_id, _, detail in victims}
    for row in sorted(rows, key=lambda r: r["lease_id"]):
        detail = details[row["lease_id"]]
        batch.add(PreemptCommand, subject=agent_subject(row["agent_id"]), stream=agent_inbox(row["agent_id"]),
                  data=_order(row) | {"grace_s": grace_s, "detail": detail})
        batch.add(LeaseRevoked, subject=lease_subject(row["lease_id"]), data={
            "lease_id": row["lease_id"], "task_id": row["task_id"], "reason": RevokeReason.PREEMPTED, "detail": detail,
        })
    return [row["lease_id"] for row in rows]


def _order(row: Row) -> dict[str, Any]:
    return {"agent_id": row["agent_id"], "lease_id": row["lease_id"], "task_id": row["task_id"],
            "fencing_token": row["fencing_token"]}
