"""Lease lifecycle writes: end leases (and move their tasks), revoke or preempt leases.

Every lease ends exactly once, in `LeaseEnder.end`, with `lease.released` (and `lease.expired`
before it when the TTL ran out): the rows are locked FOR UPDATE and only an active lease can end.
What the end does to the task is decided by the pure `shared.leasing.lease_end.decide_lease_end`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.dispatcher.emitting import EventBatch
from shared.leasing.lease_end import (
    NEW_TASK_STATE,
    REQUEUE_DETAIL,
    EndingLease,
    LeaseEnd,
    TaskEffect,
    Trigger,
    decide_lease_end,
)
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
from shared.events.states import TaskState
from shared.events.reports import PreemptCommand, RevokeCommand
from shared.events.subjects import agent_subject, lease_subject, task_subject
from shared.names import agent_inbox

Row = Mapping[str, Any]

LEASE_COLUMNS = (
    "l.lease_id, l.task_id, l.run, l.parts, l.node_id, l.agent_id, l.card_type, l.gpu_indices, l.fencing_token,"
    " l.granted_at, l.state, l.started, l.preempting, l.revoke_reason, l.resume_from, l.last_renewed_at,"
    " t.run AS task_run, t.state AS task_state, t.cancel_requested, t.cancel_reason, t.resume_from AS task_resume_from"
)


async def lock_leases(conn: asyncpg.Connection, schema: str, where: str, *args: Any) -> list[dict[str, Any]]:
    """Leases (with their task's columns) matching `where`, locked with their tasks, in id order.

    Rows come back as dicts: the caller keeps them up to date while it changes them in a batch.
    """
    s = quote_schema(schema)
    rows = await conn.fetch(
        f"SELECT {LEASE_COLUMNS} FROM {s}.leases l JOIN {s}.tasks t USING (task_id)"
        f" WHERE {where} ORDER BY l.lease_id FOR UPDATE OF l, t",
        *args,
    )
    return [dict(row) for row in rows]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What the agent said about a finished run (FINISHED trigger only)."""

    exit_code: int | None = None
    output_units: float | None = None
    error: str | None = None


class LeaseEnder:
    """Ends leases within one transaction; the row updates are written in bulk by `flush`.

    Each lease passed to `end` must be ACTIVE and locked (`lock_leases`); its dict is updated in
    place (`state`), and `task_states` says which tasks moved, so a batch of reports sees its own
    effects before they are flushed.
    """

    def __init__(self, conn: asyncpg.Connection, batch: EventBatch, revoke_grace_s: float) -> None:
        self.conn, self.batch, self.revoke_grace_s = conn, batch, revoke_grace_s
        self.ended: dict[str, str] = {}  # lease id -> release reason
        self.task_states: dict[str, str] = {}  # task id -> new state

    async def end(
        self, lease: dict[str, Any], trigger: Trigger, *, cause: Envelope | None = None,
        outcome: RunOutcome = RunOutcome(),
    ) -> LeaseEnd:
        """End one lease: free its GPUs, emit its end, and move its task."""
        if lease["task_id"] in self.task_states:  # another part of the task ended earlier in this batch
            lease["task_state"] = self.task_states[lease["task_id"]]
        others = await self._other_parts(lease)
        decision = decide_lease_end(_ending(lease, others), trigger, outcome.exit_code, outcome.error)
        lease["state"] = "ended"
        self.ended[lease["lease_id"]] = decision.release.value
        _emit_lease_end(self.batch, lease, trigger, decision, cause)
        if decision.effect is not TaskEffect.NONE:
            _emit_task_effect(self.batch, lease, decision, outcome, cause)
            self.task_states[lease["task_id"]] = NEW_TASK_STATE[decision.effect].value
        if decision.revoke_other_parts and others:
            await self._revoke_other_parts(lease, decision, cause)
        return decision

    async def flush(self) -> None:
        """Write the ended leases, their freed GPUs and the tasks' new states."""
        s = quote_schema(self.batch.schema)
        if self.ended:
            ids = list(self.ended)
            await self.conn.execute(
                f"UPDATE {s}.leases AS l SET state = 'ended', ended_at = $3, end_reason = e.reason"
                " FROM unnest($1::text[], $2::text[]) AS e(lease_id, reason) WHERE l.lease_id = e.lease_id",
                ids, [self.ended[i] for i in ids], self.batch.now,
            )
            await self.conn.execute(f"UPDATE {s}.lease_gpus SET active = false WHERE lease_id = ANY($1::text[])", ids)
        if self.task_states:
            ids = sorted(self.task_states)
            await self.conn.execute(
                f"UPDATE {s}.tasks AS t SET state = v.state, deferral_reason = NULL, deferral_detail = NULL,"
                " updated_at = now() FROM unnest($1::text[], $2::text[]) AS v(task_id, state) WHERE t.task_id = v.task_id",
                ids, [self.task_states[i] for i in ids],
            )
        self.ended, self.task_states = {}, {}

    async def _other_parts(self, lease: dict[str, Any]) -> int:
        """Other active leases of the same run (only multi-node grants have any)."""
        if lease["parts"] <= 1:
            return 0
        return await self.conn.fetchval(
            f"SELECT count(*) FROM {quote_schema(self.batch.schema)}.leases WHERE task_id = $1 AND run = $2"
            " AND state = 'active' AND lease_id <> ALL($3::text[])",
            lease["task_id"], lease["run"], [*self.ended, lease["lease_id"]],
        )

    async def _revoke_other_parts(self, lease: dict[str, Any], decision: LeaseEnd, cause: Envelope | None) -> None:
        parts = await lock_leases(
            self.conn, self.batch.schema, "l.task_id = $1 AND l.run = $2 AND l.state = 'active'"
            " AND l.lease_id <> ALL($3::text[])", lease["task_id"], lease["run"], list(self.ended),
        )
        reason = RevokeReason.CANCELLED if decision.effect is TaskEffect.CANCEL else RevokeReason.SUPERSEDED
        await revoke(self.conn, self.batch, parts, reason, "another part of the task ended",
                     grace_s=self.revoke_grace_s, cause=cause)


def _ending(lease: Row, others: int) -> EndingLease:
    return EndingLease(
        preempting=lease["preempting"],
        revoke_reason=RevokeReason(lease["revoke_reason"]) if lease["revoke_reason"] else None,
        current_run=lease["run"] == lease["task_run"],
        task_state=TaskState(lease["task_state"]),
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


def _emit_task_effect(
    batch: EventBatch, lease: Row, decision: LeaseEnd, outcome: RunOutcome, cause: Envelope | None
) -> None:
    effect, task_id, lease_id = decision.effect, lease["task_id"], lease["lease_id"]
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
            "resume_from": lease["task_resume_from"], "detail": REQUEUE_DETAIL[decision.requeue_reason],
        })


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


async def stop_zombies(conn: asyncpg.Connection, batch: EventBatch, leases: Iterable[Row], grace_s: float) -> list[str]:
    """Tell agents to stop runs whose lease already ENDED (e.g. expired during a partition) but
    which they still heartbeat: their GPUs may be leased to someone else now. Once per lease."""
    rows = await conn.fetch(
        f"UPDATE {quote_schema(batch.schema)}.leases SET revoke_reason = $2"
        " WHERE lease_id = ANY($1::text[]) AND state = 'ended' AND revoke_reason IS NULL"
        " RETURNING lease_id, task_id, agent_id, fencing_token",
        sorted({lease["lease_id"] for lease in leases}), RevokeReason.SUPERSEDED.value,
    )
    for row in sorted(rows, key=lambda r: r["lease_id"]):
        batch.add(RevokeCommand, subject=agent_subject(row["agent_id"]), stream=agent_inbox(row["agent_id"]),
                  data=_order(row) | {"reason": RevokeReason.SUPERSEDED, "grace_s": grace_s,
                                      "detail": "the lease ended; its GPUs may be leased again"})
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
