"""`apply_plan`: what a cycle's `Plan` does to the dispatcher's records — a pure fold.

Like Nomad's plan applier it re-validates the proposal against the records as they are now: a
grant whose task is no longer waiting (cancelled, or granted meanwhile) or whose node is gone or
drained is dropped; a preemption of a lease that ended or is already being stopped is dropped. Then:

- each grant: the task is `leased` (its `run` counts the grant), one lease per node with a fresh
  id and fencing token, and per lease `lease.granted` plus a `LeaseGrantCommand` to the agent's
  inbox; a task never announced as queued enters and leaves the queue in this cycle, so the first
  lease's `lease.granted` carries its entry (`queued`) instead of a `task.queued` of its own;
- each deferral: the task's state and reason as `waiting.update_waiting` decides, with
  `task.queued` / `task.held`;
- each preemption: `LeaseWork.preempt` (`lease.revoked(preempted)` + `PreemptCommand`), naming the
  task the GPUs go to;
- what a later grant owes its start to: the task preempting is flagged `preempted_for`, the holder of
  the cycle's reservation `reserved` (`queue_order`); each grant's `lease.granted` says why it started
  (`start_reason`, `passed`) and clears both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from datetime import UTC, datetime, timedelta
from typing import Any

from shared.events import LeaseGranted, TaskHeld, TaskQueued
from shared.events.reasons import StartReason
from shared.events.reports import LeaseGrantCommand
from shared.leasing.queue_order import PREEMPTED_FOR_FLAG, RESERVED_FLAG
from shared.events.states import TaskState
from shared.events.subjects import agent_subject, lease_subject, task_subject
from shared.leasing.records import LeaseBook, LeaseRecord, TaskRecord
from shared.leasing.waiting import Waiting, update_waiting
from shared.leasing.work import BookChanges, LeaseRules, LeaseWork
from shared.names import agent_inbox
from shared.scheduling.model import DeferralReason, Grant, Plan, Preemption

FreshLeases = Iterator[tuple[str, int]]
"""(lease id, fencing token) for each new lease, in order: ids and tokens come from outside the fold."""


@dataclass(frozen=True)
class CycleEffects:
    """What a cycle changes, and how much."""

    changes: BookChanges
    leases: int = 0  # leases granted
    held: int = 0  # `task.held` published
    preempted: int = 0


def leases_needed(decided: Plan) -> int:
    """How many fresh (id, token) pairs `apply_plan` may take: one per placement."""
    return sum(len(grant.placements) for grant in decided.grants)


def apply_plan(
    book: LeaseBook, decided: Plan, now: datetime, rules: LeaseRules, fresh: FreshLeases, policy_version: int | None = None,
    reasons: Mapping[str, tuple[StartReason, int]] | None = None,
) -> CycleEffects:
    """Re-validate and apply `decided` (see the module docstring); every lease records `policy_version`,
    the `policy` document version `decided` was planned with (None: the dispatcher's env preset), and
    why its task started (`reasons`, from `queue_order.start_reasons`)."""
    work = LeaseWork(book, now, rules)
    reasons = reasons or {}
    leases = sum(_grant(work, grant, fresh, policy_version, reasons.get(grant.task_id)) for grant in decided.grants)
    deferrals = decided.deferrals
    held = sum(map(partial(_defer, work), deferrals.task_ids, deferrals.reasons, deferrals.details))
    preempted = sum(_preempt(work, preemption) for preemption in decided.preemptions)
    _flag_reservations(work, decided)
    return CycleEffects(work.changes(), leases, held, preempted)


def _grant(work: LeaseWork, grant: Grant, fresh: FreshLeases, policy_version: int | None,
           reason: tuple[StartReason, int] | None) -> int:
    task = work.task(grant.task_id)
    nodes = [work.node(p.node_id) for p in grant.placements]
    if task is None or not task.in_queue or any(node is None or not node.takes_leases for node in nodes):
        return 0
    queued = None if task.queued_announced else queue_entry(task)  # first found eligible: the grant carries it
    task = replace(task, state=TaskState.LEASED, run=task.run + 1, deferral_reason=None, deferral_detail=None,
                   queued_announced=True, updated_at=work.now, flags=task.flags - {RESERVED_FLAG, PREEMPTED_FOR_FLAG})
    start_reason, passed = reason or (None, 0)
    work.put(task)
    runtime_s = next(o.runtime_s for o in task.options if o.card_type == grant.card_type)
    for placement, node in zip(grant.placements, nodes, strict=True):
        assert node is not None
        lease_id, token = next(fresh)
        lease = LeaseRecord(
            lease_id=lease_id, task_id=task.task_id, run=task.run, parts=len(grant.placements), node_id=node.node_id,
            agent_id=node.agent_id, card_type=grant.card_type, gpu_indices=tuple(placement.gpu_indices),
            fencing_token=token, granted_at=work.now, ttl_s=work.rules.lease_ttl_s,
            expires_at=work.now + timedelta(seconds=work.rules.lease_ttl_s),
            estimated_end=datetime.fromtimestamp(grant.estimated_end, UTC), resume_from=task.resume_from,
            policy_version=policy_version, borrowed_headroom=grant.borrowed_headroom,
        )
        work.grant(lease)
        _announce_lease(work, lease, task, runtime_s, {"start_reason": start_reason, "passed": passed,
                                                       "time_scale": node.time_scale, "queued": queued})
        queued = None  # one entry into the queue: on the first lease's event only
    return len(grant.placements)


def _flag_reservations(work: LeaseWork, decided: Plan) -> None:
    """Flag the cycle's reservation holder `reserved`; unflag a task that no longer holds it."""
    holders = {reservation.task_id for reservation in decided.reservations}
    for task_id in decided.deferrals.task_ids:
        task = work.task(task_id)
        if task is None or not task.in_queue:
            continue
        flags = task.flags | {RESERVED_FLAG} if task_id in holders else task.flags - {RESERVED_FLAG}
        if flags != task.flags:
            work.put(replace(task, flags=frozenset(flags)))


def _announce_lease(work: LeaseWork, lease: LeaseRecord, task: TaskRecord, runtime_s: float,
                    granted_fields: dict[str, Any]) -> None:
    common = {"lease_id": lease.lease_id, "task_id": lease.task_id, "agent_id": lease.agent_id,
              "gpu_indices": list(lease.gpu_indices), "fencing_token": lease.fencing_token,
              "expires_at": lease.expires_at, "resume_from": lease.resume_from, "ttl_s": lease.ttl_s}
    work.emit(LeaseGranted, lease_subject(lease.lease_id), common | {
        "node_id": lease.node_id, "card_type": lease.card_type, "parts": lease.parts,
        "policy_version": lease.policy_version, "borrowed_headroom": lease.borrowed_headroom, **granted_fields,
    })
    work.emit(LeaseGrantCommand, agent_subject(lease.agent_id), common | {
        "command": task.command, "env": dict(task.env or {}), "image": task.image,
        "checkpoint_interval_s": task.checkpoint_interval_s, "estimated_runtime_s": runtime_s,
        "output_unit": task.output_unit, "labels": dict(task.labels or {}),
    }, stream=agent_inbox(lease.agent_id))


def _defer(work: LeaseWork, task_id: str, reason: DeferralReason, detail: str) -> int:
    """Store a deferral's effect (the task waits for `reason`, `detail` says so) on a still-waiting
    task; 1 if `task.held` was published."""
    task = work.task(task_id)
    if task is None or not task.in_queue:
        return 0
    waiting = Waiting(task.state, task.deferral_reason, task.queued_announced, task.updated_at or work.now)
    update = update_waiting(reason, waiting, work.now, work.rules.capacity_reason_every_s)
    if update is None:
        return 0
    work.put(replace(task, state=update.state, deferral_reason=update.reason,
                     deferral_detail=detail if update.reason else None,
                     queued_announced=update.queued_announced, updated_at=work.now))
    subject = task_subject(task.task_id)
    if update.announce_queued:
        work.emit(TaskQueued, subject, queued_data(task))
    if update.publish_held:
        work.emit(TaskHeld, subject, {"task_id": task.task_id, "reason": reason, "detail": detail})
    return int(update.publish_held)


def _preempt(work: LeaseWork, preemption: Preemption) -> int:
    """Why a victim is preempted: the class of the task it yields to (core work, or a due reservation)."""
    task = work.task(preemption.for_task_id)
    klass = task.priority_class.value if task is not None and task.priority_class is not None else "queued"
    detail = f"{klass} task {preemption.for_task_id} needs the GPUs"
    preempted = work.preempt(preemption.lease_id, preemption.for_task_id, detail)
    if preempted and task is not None and PREEMPTED_FOR_FLAG not in task.flags:
        work.put(replace(task, flags=task.flags | {PREEMPTED_FOR_FLAG}))
    return int(preempted)


def queued_data(task: TaskRecord) -> dict[str, Any]:
    """`task.queued`'s payload."""
    return {"task_id": task.task_id} | queue_entry(task)


def queue_entry(task: TaskRecord) -> dict[str, Any]:
    """What the task enters the queue with (`task.queued`'s facts; `lease.granted.queued` when carried)."""
    return {"project": task.project, "priority_class": task.priority_class, "priority": task.priority}
