"""The HTTP API v1: submit, list, show and cancel tasks; the readiness board; the fleet.

Writes go through intake's commands (`services.intake.commands`) with an intake `Emitter`, so an
HTTP submission is exactly an ingest submission: validated, stored, `task.submitted` or
`task.rejected` in intake's outbox. Reads come from the views (eventually consistent: a task
submitted a moment ago may answer 404 for a short while).

Who is asking: the caller's token (`services.console.auth`; app.py requires one on every route
here). Events record `principal.actor` (`user:<token name>`); a submission or a cancellation needs
role `submitter` (or `operator`, `admin`) for the task's project, else 403 and nothing is written.

Hostile input is a 4xx that names the problem, never a 500 (a 500 also made uvicorn close the
kept-alive connection, losing the next request a client sent on it): a body that is not
`application/json` is a 415, one over `MAX_BODY_BYTES` a 413 (refused from its Content-Length
before it is read), anything else intake rejects a 422 with every problem, and an idempotency
key reused with a different body a 409. Path ids are checked before they reach PostgreSQL.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, AwareDatetime, BaseModel, Field

from services.common.runtime import Emitter
from services.console.views import (
    DEFAULT_LIMIT,
    Fleet,
    HistoryEntry,
    TaskFilter,
    find_task_by_idempotency_key,
    list_tasks,
    load_fleet,
    load_task,
    task_history,
)
from services.console.auth import Authenticated
from services.intake.commands import load_task_project, request_cancel, submit_task
from services.readiness.board import load_board
from shared.events.states import TaskState
from shared.identity import Role, require
from shared.task_view import TaskView
from shared.submission import Problem
from shared.submission.limits import MAX_SUBMISSION_BYTES
from shared.submission.storable import unstorable_text

INTAKE_SCHEMA = "intake"
MAX_BODY_BYTES = MAX_SUBMISSION_BYTES
JSON_MEDIA_TYPES = ("application/json",)
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$"

TaskIdPath = Annotated[str, Path(pattern=TASK_ID_PATTERN, description="a task id, as POST /v1/tasks returned it")]


def _storable_reason(reason: str | None) -> str | None:
    if reason is not None and unstorable_text(reason) is not None:
        raise ValueError("text without NUL characters or unpaired surrogates")
    return reason

router = APIRouter(prefix="/v1")


class Submitted(BaseModel):
    task_id: str
    created: bool = Field(description="False when the idempotency key was seen before (task_id is the original)")


class Rejected(BaseModel):
    task_id: str | None = Field(description="id of the rejected attempt (look it up with GET /v1/tasks/{id})")
    problems: list[Problem] = Field(description="every problem: field, value received, what was expected")


class CancelAccepted(BaseModel):
    task_id: str
    cancel_requested: bool = True


class CancelBody(BaseModel):
    reason: Annotated[str | None, AfterValidator(_storable_reason)] = Field(None, max_length=2000)


class TaskWithHistory(BaseModel):
    task: TaskView
    history: list[HistoryEntry]


class BoardSummary(BaseModel):
    ready: int
    waiting: int
    checking: int
    tasks: list[dict[str, Any]] = Field(description="open tasks: waiting (with missing inputs) first, then ready")


def pool_of(request: Request) -> asyncpg.Pool:
    return request.app.state.pool


Pool = Annotated[asyncpg.Pool, Depends(pool_of)]


def intake_emitter(request: Request, actor: str) -> Emitter:
    return Emitter(INTAKE_SCHEMA, request.app.state.producer, actor)


@router.post(
    "/tasks",
    status_code=201,
    response_model=Submitted,
    responses={200: {"model": Submitted, "description": "idempotency key seen before, same body"},
               409: {"model": Rejected, "description": "idempotency key seen before with a different body"},
               413: {"description": f"body over {MAX_BODY_BYTES} bytes"},
               415: {"description": "body not sent as application/json"},
               422: {"model": Rejected, "description": "invalid submission, every problem listed"}},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/TaskSubmission"}}}}},
    summary="Submit a task (body = submission schema v1)",
)
async def post_task(request: Request, pool: Pool, principal: Authenticated) -> JSONResponse:
    _require_json(request)
    body = await read_body(request, MAX_BODY_BYTES)
    require(principal, Role.SUBMITTER, principal.project)  # no submitting role at all: 403 before any work

    def may_submit(project: str | None) -> None:  # the project as resolved, its template applied
        require(principal, Role.SUBMITTER, project or principal.project)

    outcome = await submit_task(pool, intake_emitter(request, principal.actor), body, principal.actor, authorize=may_submit)
    if outcome.problems:
        rejected = Rejected(task_id=outcome.task_id, problems=outcome.problems)
        return JSONResponse(rejected.model_dump(mode="json"), status_code=409 if outcome.conflict_with else 422)
    submitted = Submitted(task_id=outcome.task_id, created=outcome.created)
    return JSONResponse(submitted.model_dump(), status_code=201 if outcome.created else 200)


def _require_json(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in JSON_MEDIA_TYPES and not media_type.endswith("+json"):
        raise HTTPException(415, f"send the submission as application/json (got {media_type or 'no content type'!r})")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed `limit` bytes."""
    too_large = HTTPException(413, f"a submission is at most {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


@router.get("/tasks", response_model=list[TaskView], summary="Recently changed tasks")
async def get_tasks(
    pool: Pool,
    state: Annotated[TaskState | None, Query(description="only tasks in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = DEFAULT_LIMIT,
    idempotency_key: Annotated[str | None, Query(max_length=200, description="only the task submitted with this key"
                                                 " (if only rejected attempts used it, the latest of them)")] = None,
    project: Annotated[str | None, Query(max_length=200, description="only this project's tasks")] = None,
    priority_class: Annotated[str | None, Query(max_length=50, description="only this class (core, standard, opportunistic)")] = None,
    name: Annotated[str | None, Query(max_length=300, description="only tasks with this name; `*` matches any characters")] = None,
    since: Annotated[AwareDatetime | None, Query(description="only tasks submitted at or after this time (with a zone)")] = None,
) -> list[TaskView]:  # fmt: skip
    if idempotency_key is not None:
        found = await find_task_by_idempotency_key(pool, idempotency_key)
        return [found] if found is not None and (state is None or found.state == state) else []
    return await list_tasks(pool, state, limit, TaskFilter(None, project, priority_class, name, since))


@router.get("/tasks/{task_id}", response_model=TaskView, responses={404: {"description": "unknown task"}})
async def get_task(task_id: TaskIdPath, pool: Pool) -> TaskView:
    view = await load_task(pool, task_id)
    if view is None:
        raise HTTPException(404, _not_found(task_id))
    return view


@router.get("/tasks/{task_id}/history", response_model=TaskWithHistory, responses={404: {"description": "unknown task"}})
async def get_task_history(task_id: TaskIdPath, pool: Pool) -> TaskWithHistory:
    view = await load_task(pool, task_id)
    if view is None:
        raise HTTPException(404, _not_found(task_id))
    return TaskWithHistory(task=view, history=await task_history(pool, task_id))


@router.post(
    "/tasks/{task_id}/cancel", status_code=202, response_model=CancelAccepted,
    responses={404: {"description": "unknown task"}},
)
async def cancel_task(
    task_id: TaskIdPath, request: Request, pool: Pool, principal: Authenticated,
    body: Annotated[CancelBody | None, Body()] = None,
) -> CancelAccepted:  # fmt: skip
    require(principal, Role.SUBMITTER, principal.project)  # no submitting role at all: 403 before any lookup
    project = await load_task_project(pool, task_id)
    if project is None:
        raise HTTPException(404, f"no task with id {task_id!r} was ever submitted; nothing to cancel")
    require(principal, Role.SUBMITTER, project)
    emitter = intake_emitter(request, principal.actor)
    await request_cancel(pool, emitter, task_id, principal.actor, body.reason if body else None)
    return CancelAccepted(task_id=task_id)


@router.get("/board", response_model=BoardSummary, summary="Readiness board: what can run, what waits on which data")
async def get_board(pool: Pool) -> BoardSummary:
    try:
        rows = await load_board(pool)
    except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
        raise HTTPException(503, "the readiness board is not available yet: the readiness service has not started") from None
    statuses = [row.status for row in rows]
    return BoardSummary(
        ready=statuses.count("ready"), waiting=statuses.count("waiting"), checking=statuses.count("checking"),
        tasks=[{**asdict(row), "status": row.status} for row in rows],
    )


@router.get("/fleet", response_model=Fleet, summary="Nodes, their leases in force, totals per card type")
async def get_fleet(pool: Pool) -> Fleet:
    return await load_fleet(pool)


def _not_found(task_id: str) -> str:
    return (
        f"no task with id {task_id!r} in the views; if it was submitted a moment ago, retry shortly"
        " (views are updated from the event log), otherwise check the id"
    )
