"""Operators' verbs on the API side: is the request sensible now, and append it (`shared.events.operator`).

    refusal = task_verb_refusal(TaskVerb.HOLD, view)     # pure: None, or why it would change nothing (409)
    await request_task_verb(pool, emitter, TaskVerb.HOLD, task_id, reason)

The console's API checks a request against the views (eventually consistent) and answers 409 with
the sentence when it cannot apply (release of a task nobody held, requeue of a queued task, ...),
so an operator learns at once. The dispatcher applies the same rules to its own records
(`shared.leasing.operator`) when it reads the request, and is the one that decides: a request the
views still allowed but that no longer applies there changes nothing (the dispatcher logs why).
Every request is an event in intake's outbox (the command gateway, like a cancellation) with the
operator's token as actor and their reason.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from shared.events.emission import Emission
from shared.events.operator import (
    NodeDrainRequested,
    NodeUndrainRequested,
    TaskHoldRequested,
    TaskPriorityChangeRequested,
    TaskReleaseRequested,
    TaskRequeueRequested,
)
from shared.events.states import TaskState
from shared.events.subjects import node_subject, task_subject
from shared.task_view import TaskView
from shared.leasing.records import PERSON_HOLDS
from shared.scheduling.model import DeferralReason

RUN_STATES = frozenset({TaskState.LEASED, TaskState.RUNNING})


class TaskVerb(StrEnum):
    HOLD = "hold"
    RELEASE = "release"
    REQUEUE = "requeue"
    PRIORITY = "priority"


class NodeVerb(StrEnum):
    DRAIN = "drain"
    UNDRAIN = "undrain"


REQUEST_OF_TASK_VERB = {
    TaskVerb.HOLD: TaskHoldRequested, TaskVerb.RELEASE: TaskReleaseRequested,
    TaskVerb.REQUEUE: TaskRequeueRequested, TaskVerb.PRIORITY: TaskPriorityChangeRequested,
}
REQUEST_OF_NODE_VERB = {NodeVerb.DRAIN: NodeDrainRequested, NodeVerb.UNDRAIN: NodeUndrainRequested}


def operator_held(view: TaskView) -> bool:
    return view.state is TaskState.HELD and view.reason == DeferralReason.OPERATOR.value


def held_for_a_person(view: TaskView) -> bool:
    """Held for a reason only a person lifts (an operator's hold, repeated idle reclaims): release applies."""
    return view.state is TaskState.HELD and view.reason in {reason.value for reason in PERSON_HOLDS}


def task_verb_refusal(verb: TaskVerb, view: TaskView, priority: int | None = None) -> str | None:
    """Why `verb` would change nothing for the task as the views show it, or None (pure)."""
    task, state = view.id, view.state
    now = f"it is {state.value} ({view.reason_detail or view.reason})"
    if state.is_terminal:
        return f"task {task} is {state.value}; {verb.value} changes nothing"
    if view.cancel_requested:
        return f"task {task} is being cancelled; {verb.value} changes nothing"
    if verb is TaskVerb.HOLD:
        if state in RUN_STATES:
            return f"task {task} is {state.value}; requeue it first (`cardflow requeue`), then hold it"
        if operator_held(view):
            return f"task {task} is already held by an operator: {view.reason_detail}"
    elif verb is TaskVerb.RELEASE:
        if not held_for_a_person(view):
            return f"task {task} is not held for a person ({now}); nothing to release"
    elif verb is TaskVerb.REQUEUE:
        if state not in RUN_STATES:
            return f"task {task} is not leased or running ({now}); nothing to requeue"
    elif verb is TaskVerb.PRIORITY and priority is not None and view.priority == priority:
        return f"task {task} already has priority {priority}"
    return None


def node_verb_refusal(verb: NodeVerb, node: dict[str, Any]) -> str | None:
    """Why `verb` would change nothing for the node (a `views.nodes` row), or None (pure)."""
    if verb is NodeVerb.DRAIN and node["drained"]:
        return f"node {node['node_id']} is already drained (by {node['drained_by']}: {node['drain_reason']})"
    if verb is NodeVerb.UNDRAIN and not node["drained"]:
        return f"node {node['node_id']} is not drained; nothing to undrain"
    return None


async def request_task_verb(pool: asyncpg.Pool, emitter: Emitter, verb: TaskVerb, task_id: str, reason: str,
                            priority: int | None = None) -> None:  # fmt: skip
    """Append the request (intake's outbox; the emitter's actor is the operator)."""
    data: dict[str, Any] = {"task_id": task_id, "reason": reason}
    if verb is TaskVerb.PRIORITY:
        data["priority"] = priority
    async with pool.acquire() as conn, conn.transaction():
        await emitter.emit(conn, [Emission(REQUEST_OF_TASK_VERB[verb], task_subject(task_id), data)])


async def request_node_verb(pool: asyncpg.Pool, emitter: Emitter, verb: NodeVerb, node_id: str, reason: str) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await emitter.emit(conn, [Emission(REQUEST_OF_NODE_VERB[verb], node_subject(node_id),
                                           {"node_id": node_id, "reason": reason})])


async def task_submitted(pool: asyncpg.Pool, task_id: str) -> bool:
    """Intake stored this task (the views may not show it yet)."""
    return bool(await pool.fetchval("SELECT EXISTS (SELECT 1 FROM intake.tasks WHERE task_id = $1)", task_id))


async def load_node_row(pool: asyncpg.Pool, node_id: str) -> dict[str, Any] | None:
    row = await pool.fetchrow(
        "SELECT node_id, alive, drained, drained_by, drain_reason FROM views.nodes WHERE node_id = $1", node_id
    )
    return dict(row) if row is not None else None
