"""Operators' verbs over HTTP (role operator; a project-scoped operator only on its project's tasks).

    POST /v1/tasks/{task_id}/hold       {"reason"}              keep a waiting task out of the queue
    POST /v1/tasks/{task_id}/release    {"reason"}              put a task an operator held back
    POST /v1/tasks/{task_id}/requeue    {"reason"}              stop its run; queue it again (resumes from its checkpoint)
    POST /v1/tasks/{task_id}/priority   {"priority", "reason"}  its order within its class
    POST /v1/nodes/{node_id}/drain      {"reason"}              no new leases there; running ones finish
    POST /v1/nodes/{node_id}/undrain    {"reason"}

Answers: 202 the request is recorded (`task.hold_requested` ..., actor = the caller's token) and the
dispatcher carries it out within a cycle; 404 unknown task or node; 409 the request would change
nothing now (the detail says what the task or node is doing); 401/403 token and role.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import BaseModel, Field

from services.common.runtime import Emitter
from services.console.api import TaskIdPath
from services.console.auth import Authenticated
from services.console.routes.common import Pool
from services.console.views import load_task
from services.operator.verbs import (
    NodeVerb,
    TaskVerb,
    load_node_row,
    node_verb_refusal,
    request_node_verb,
    request_task_verb,
    task_submitted,
    task_verb_refusal,
)
from shared.events.operator import OperatorReason, TaskPriority
from shared.identity import Principal, Role, require

router = APIRouter(tags=["operator"])
INTAKE_SCHEMA = "intake"  # the command gateway's outbox carries operators' requests

NodeIdPath = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$", description="a node id (`cardflow nodes`)")]


class VerbBody(BaseModel):
    reason: OperatorReason


class PriorityBody(BaseModel):
    priority: TaskPriority
    reason: OperatorReason


class VerbAccepted(BaseModel):
    verb: str
    task_id: str | None = None
    node_id: str | None = None
    priority: int | None = None
    requested_by: str = Field(description="the actor recorded with the request")
    was: str = Field(description="the task's or node's state as the views showed it when the request was made")


@router.post("/tasks/{task_id}/hold", status_code=202, response_model=VerbAccepted,
             summary="Hold a waiting task: out of the queue until released (operator)")  # fmt: skip
async def hold(task_id: TaskIdPath, body: VerbBody, request: Request, pool: Pool, principal: Authenticated) -> VerbAccepted:
    return await _task_verb(request, pool, principal, TaskVerb.HOLD, task_id, body.reason)


@router.post("/tasks/{task_id}/release", status_code=202, response_model=VerbAccepted,
             summary="Release a task an operator held: back in the queue (operator)")  # fmt: skip
async def release(task_id: TaskIdPath, body: VerbBody, request: Request, pool: Pool, principal: Authenticated) -> VerbAccepted:
    return await _task_verb(request, pool, principal, TaskVerb.RELEASE, task_id, body.reason)


@router.post("/tasks/{task_id}/requeue", status_code=202, response_model=VerbAccepted,
             summary="Requeue a leased or running task: its run stops, it waits again from its checkpoint (operator)")  # fmt: skip
async def requeue(task_id: TaskIdPath, body: VerbBody, request: Request, pool: Pool, principal: Authenticated) -> VerbAccepted:
    return await _task_verb(request, pool, principal, TaskVerb.REQUEUE, task_id, body.reason)


@router.post("/tasks/{task_id}/priority", status_code=202, response_model=VerbAccepted,
             summary="Change a task's priority within its class (operator)")  # fmt: skip
async def priority(task_id: TaskIdPath, body: PriorityBody, request: Request, pool: Pool,
                   principal: Authenticated) -> VerbAccepted:  # fmt: skip
    return await _task_verb(request, pool, principal, TaskVerb.PRIORITY, task_id, body.reason, body.priority)


@router.post("/nodes/{node_id}/drain", status_code=202, response_model=VerbAccepted,
             summary="Drain a node: no new leases there; running ones finish (operator)")  # fmt: skip
async def drain(node_id: NodeIdPath, body: VerbBody, request: Request, pool: Pool, principal: Authenticated) -> VerbAccepted:
    return await _node_verb(request, pool, principal, NodeVerb.DRAIN, node_id, body.reason)


@router.post("/nodes/{node_id}/undrain", status_code=202, response_model=VerbAccepted,
             summary="Undrain a node: it takes new leases again (operator)")  # fmt: skip
async def undrain(node_id: NodeIdPath, body: VerbBody, request: Request, pool: Pool, principal: Authenticated) -> VerbAccepted:
    return await _node_verb(request, pool, principal, NodeVerb.UNDRAIN, node_id, body.reason)


def _emitter(request: Request, principal: Principal) -> Emitter:
    return Emitter(INTAKE_SCHEMA, request.app.state.producer, principal.actor)


async def _task_verb(request: Request, pool: Pool, principal: Principal, verb: TaskVerb, task_id: str, reason: str,
                     priority: int | None = None) -> VerbAccepted:  # fmt: skip
    view = await load_task(pool, task_id)
    if view is None and not await task_submitted(pool, task_id):
        raise HTTPException(404, f"no task with id {task_id!r} was ever submitted; nothing to {verb.value}")
    require(principal, Role.OPERATOR, project=view.project if view is not None else None)
    if view is not None and (refusal := task_verb_refusal(verb, view, priority)) is not None:
        raise HTTPException(409, refusal)
    await request_task_verb(pool, _emitter(request, principal), verb, task_id, reason, priority)
    was = view.state.value if view is not None else "submitted (not in the views yet)"
    return VerbAccepted(verb=verb.value, task_id=task_id, priority=priority, requested_by=principal.actor, was=was)


async def _node_verb(request: Request, pool: Pool, principal: Principal, verb: NodeVerb, node_id: str,
                     reason: str) -> VerbAccepted:  # fmt: skip
    require(principal, Role.OPERATOR)
    node = await load_node_row(pool, node_id)
    if node is None:
        raise HTTPException(404, f"no node {node_id!r} has registered (`cardflow nodes` lists them)")
    if (refusal := node_verb_refusal(verb, node)) is not None:
        raise HTTPException(409, refusal)
    await request_node_verb(pool, _emitter(request, principal), verb, node_id, reason)
    was = ("drained" if node["drained"] else "up") if node["alive"] else "lost"
    return VerbAccepted(verb=verb.value, node_id=node_id, requested_by=principal.actor, was=was)
