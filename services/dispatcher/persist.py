"""Step 3 of the cycle: persist a plan in ONE transaction, after re-checking the leader epoch.

Like Nomad's plan applier, the persist step re-validates the proposal against the latest state:
only tasks still queued or held (not cancelled meanwhile) are granted, and the database's
partial unique index on active lease GPUs refuses any double booking. For each grant: one lease
per node (fencing token from the sequence), its GPUs, `task.queued` if the task was never
announced, `lease.granted`, and a `LeaseGrantCommand` to the agent's inbox. Deferrals update the
task's state and reason (`shared.leasing.waiting.update_waiting`); preemptions send `PreemptCommand`s.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from services.dispatcher.context import Dispatcher
from services.dispatcher.emitting import EventBatch
from services.dispatcher.leases import preempt
from services.dispatcher.store import CycleInput
from shared.leasing.waiting import Waiting, WaitingUpdate, update_waiting
from shared.delivery.db import quote_schema
from shared.events import LeaseGranted, TaskHeld, TaskQueued, new_event_id
from shared.events.reports import LeaseGrantCommand
from shared.events.subjects import agent_subject, lease_subject, task_subject
from shared.names import agent_inbox
from shared.events.states import TaskState
from shared.scheduling.model import Deferral, DeferralReason, Grant, Plan, QueuedTask


@dataclass(frozen=True)
class Persisted:
    """What a cycle wrote."""

    leases: int = 0
    held: int = 0
    preempted: int = 0


async def persist_plan(dc: Dispatcher, given: CycleInput, decided: Plan, now: datetime) -> Persisted:
    """Write the plan's grants, deferral changes and preemptions in one transaction."""
    changes = _deferral_changes(given, decided.deferrals, now, dc.config.capacity_reason_every_s)
    if not decided.grants and not changes and not decided.preemptions:
        return Persisted()
    async with dc.writing() as conn:
        batch = dc.batch(now)
        leases = await save_grants(conn, dc, batch, given, decided.grants)
        held = await save_deferrals(conn, batch, given, changes)
        victims = [(p.lease_id, p.for_task_id, _preemption_reason(given, p.for_task_id)) for p in decided.preemptions]
        preempted = await preempt(conn, batch, victims, dc.config.preempt_grace_s) if victims else []
        await batch.flush(conn)
    return Persisted(leases=leases, held=held, preempted=len(preempted))


def _preemption_reason(given: CycleInput, for_task_id: str) -> str:
    """Why a victim is preempted: a core task, or the task whose due reservation it filled."""
    row = given.tasks.get(for_task_id)
    klass = row["priority_class"] if row is not None else "queued"
    return f"{klass} task {for_task_id} needs the GPUs"


# -- grants --------------------------------------------------------------------------------------


async def save_grants(
    conn: asyncpg.Connection, dc: Dispatcher, batch: EventBatch, given: CycleInput, grants: tuple[Grant, ...]
) -> int:
    """Lease rows, GPU rows, events and commands for every grant whose task is still waiting."""
    if not grants:
        return 0
    s = quote_schema(dc.schema)
    claimed = {
        row["task_id"]: row
        for row in await conn.fetch(
            f"UPDATE {s}.tasks SET state = 'leased', run = run + 1, deferral_reason = NULL, deferral_detail = NULL,"
            " queued_announced = true, updated_at = now()"
            " WHERE task_id = ANY($1::text[]) AND state IN ('queued', 'held') AND NOT cancel_requested"
            " RETURNING task_id, run, resume_from, command, env, image, output_unit, checkpoint_interval_s",
            sorted(grant.task_id for grant in grants),
        )
    }
    queue = {task.task_id: task for task in given.queue}
    leases = [lease for g in grants if g.task_id in claimed for lease in _leases_of(dc, given, g, claimed[g.task_id], batch.now)]
    if not leases:
        return 0
    tokens = await _insert_leases(conn, s, leases)
    for lease in leases:
        lease["fencing_token"] = tokens[lease["lease_id"]]
    leases_of_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for lease in leases:
        leases_of_task[lease["task_id"]].append(lease)
    for grant in grants:
        if grant.task_id in claimed:
            _announce_grant(batch, given, queue[grant.task_id], claimed[grant.task_id], leases_of_task[grant.task_id])
    return len(leases)


def _leases_of(dc: Dispatcher, given: CycleInput, grant: Grant, task: Any, now: datetime) -> list[dict[str, Any]]:
    ttl = dc.config.lease_ttl_s
    return [
        {
            "lease_id": new_event_id(), "task_id": grant.task_id, "run": task["run"], "parts": len(grant.placements),
            "node_id": p.node_id, "agent_id": given.nodes[p.node_id]["agent_id"], "card_type": grant.card_type,
            "gpu_indices": list(p.gpu_indices), "granted_at": now, "ttl_s": ttl,
            "expires_at": now + timedelta(seconds=ttl),
            "estimated_end": datetime.fromtimestamp(grant.estimated_end, UTC), "resume_from": task["resume_from"],
        }
        for p in grant.placements
    ]


async def _insert_leases(conn: asyncpg.Connection, s: str, leases: list[dict[str, Any]]) -> dict[str, int]:
    """Multi-row inserts of leases (tokens from the sequence) and their GPUs; lease id -> token."""
    def col(name: str) -> list[Any]:
        return [lease[name] for lease in leases]

    rows = await conn.fetch(
        f"INSERT INTO {s}.leases (lease_id, task_id, run, parts, node_id, agent_id, card_type, gpu_indices,"
        " fencing_token, granted_at, ttl_s, expires_at, estimated_end, resume_from)"
        f" SELECT id, t, r, p, n, a, c, g::int[], nextval('{s}.fencing_tokens'), ga, ttl, ex, ee, rf"
        " FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[],"
        " $9::timestamptz[], $10::float8[], $11::timestamptz[], $12::timestamptz[], $13::text[])"
        " WITH ORDINALITY AS x(id, t, r, p, n, a, c, g, ga, ttl, ex, ee, rf, ord) ORDER BY ord"
        " RETURNING lease_id, fencing_token",
        col("lease_id"), col("task_id"), col("run"), col("parts"), col("node_id"), col("agent_id"), col("card_type"),
        ["{" + ",".join(map(str, lease["gpu_indices"])) + "}" for lease in leases], col("granted_at"), col("ttl_s"),
        col("expires_at"), col("estimated_end"), col("resume_from"),
    )
    gpus = [(lease["lease_id"], lease["node_id"], index) for lease in leases for index in lease["gpu_indices"]]
    await conn.execute(
        f"INSERT INTO {s}.lease_gpus (lease_id, node_id, gpu_index) SELECT * FROM unnest($1::text[], $2::text[], $3::int[])",
        [g[0] for g in gpus], [g[1] for g in gpus], [g[2] for g in gpus],
    )
    return {row["lease_id"]: row["fencing_token"] for row in rows}


def _announce_grant(batch: EventBatch, given: CycleInput, task: QueuedTask, claimed: Any, leases: list[dict[str, Any]]) -> None:
    """`task.queued` (first time only), then per lease `lease.granted` and the agent's command."""
    if not given.tasks[task.task_id]["queued_announced"]:
        batch.add(TaskQueued, subject=task_subject(task.task_id), data=_queued_data(task))
    runtime_s = next(o.runtime_s for o in task.options if o.card_type == leases[0]["card_type"])
    for lease in leases:
        common = {key: lease[key] for key in ("lease_id", "task_id", "agent_id", "gpu_indices", "fencing_token",
                                               "expires_at", "resume_from")} | {"ttl_s": lease["ttl_s"]}
        batch.add(LeaseGranted, subject=lease_subject(lease["lease_id"]), data=common | {
            "node_id": lease["node_id"], "card_type": lease["card_type"], "parts": lease["parts"],
        })
        batch.add(LeaseGrantCommand, subject=agent_subject(lease["agent_id"]), stream=agent_inbox(lease["agent_id"]),
                  data=common | {
                      "command": claimed["command"], "env": claimed["env"] or {}, "image": claimed["image"],
                      "checkpoint_interval_s": claimed["checkpoint_interval_s"], "estimated_runtime_s": runtime_s,
                      "output_unit": claimed["output_unit"],
                  })


def _queued_data(task: QueuedTask) -> dict[str, Any]:
    return {"task_id": task.task_id, "project": task.project, "priority_class": task.priority_class,
            "priority": task.priority}


# -- deferrals -----------------------------------------------------------------------------------


def _deferral_changes(
    given: CycleInput, deferrals: tuple[Deferral, ...], now: datetime, settle_s: float
) -> list[tuple[Deferral, WaitingUpdate]]:
    """Deferrals that change a task's row (`shared.leasing.waiting.update_waiting`), with the change."""
    changes = []
    for deferral in deferrals:
        row = given.tasks[deferral.task_id]
        waiting = Waiting(TaskState(row["state"]), DeferralReason(row["deferral_reason"]) if row["deferral_reason"] else None,
                          row["queued_announced"], row["updated_at"])
        update = update_waiting(deferral.reason, waiting, now, settle_s)
        if update is not None:
            changes.append((deferral, update))
    return changes


async def save_deferrals(conn: asyncpg.Connection, batch: EventBatch, given: CycleInput, changes: list) -> int:
    """Store new states and reasons; `task.queued` / `task.held` for tasks still waiting."""
    if not changes:
        return 0
    rows = await conn.fetch(
        f"UPDATE {quote_schema(batch.schema)}.tasks AS t SET state = v.state, deferral_reason = v.reason,"
        " deferral_detail = v.detail, queued_announced = v.announced, updated_at = now()"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[]) AS v(task_id, state, reason, detail, announced)"
        " WHERE t.task_id = v.task_id AND t.state IN ('queued', 'held') AND NOT t.cancel_requested RETURNING t.task_id",
        [d.task_id for d, _ in changes], [c.state.value for _, c in changes],
        [c.reason.value if c.reason else None for _, c in changes], [d.detail if c.reason else None for d, c in changes],
        [c.queued_announced for _, c in changes],
    )
    still_waiting = {row["task_id"] for row in rows}
    queue = {task.task_id: task for task in given.queue}
    held = 0
    for deferral, change in changes:
        if deferral.task_id not in still_waiting:
            continue
        subject = task_subject(deferral.task_id)
        if change.announce_queued:
            batch.add(TaskQueued, subject=subject, data=_queued_data(queue[deferral.task_id]))
        if change.publish_held:
            held += 1
            batch.add(TaskHeld, subject=subject,
                      data={"task_id": deferral.task_id, "reason": deferral.reason.value, "detail": deferral.detail})
    return held
