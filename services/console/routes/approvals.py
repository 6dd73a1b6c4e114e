"""Approvals: a reviewer approves or denies a task that waits for approval.

    POST /v1/tasks/{task_id}/approve   {"reason"}      (role reviewer)
    POST /v1/tasks/{task_id}/deny      {"reason"}
    GET  /v1/approvals/decisions?days=7                 (any token: who decided what, and why)

Who may: a token with the reviewer role (admin too) whose name the policy lists among the task's
project's reviewers (`reviewers` section; none listed: any reviewer) — never the task's submitter.
What: the task must be waiting for approval (held `not_approved`); the decision is appended as
`task.reviewed` (intake's outbox, the caller as actor, with the reason) and the dispatcher carries
it out: `task.approved` (it may start) or `task.denied` + `task.cancelled`.

Answers: 202 accepted; 403 not a reviewer of the project, or the submitter; 404 unknown task; 409
not waiting for approval (the detail says what it waits for).
"""

from __future__ import annotations

import json

from datetime import datetime, timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from services.common.runtime import Emitter
from services.config.holder import DocumentHolder, PolicyInForce, policy_in_force_holder
from services.console.api import TaskIdPath
from services.console.auth import Authenticated
from services.console.routes.common import Pool, now_utc
from services.audit.reading import SCHEMA as AUDIT
from services.console.store import SCHEMA as VIEWS
from services.console.views import MISSING_TABLES
from services.console.views import load_task
from shared.config import PolicyDocument
from shared.events import TaskReviewed
from shared.events.emission import Emission
from shared.events.intake import ReviewDecision
from shared.events.states import TaskState
from shared.events.subjects import task_subject
from shared.events.values import Detail
from shared.identity import Principal, Role, require
from shared.task_view import TaskView
from shared.scheduling.model import DeferralReason
from shared.scheduling.policy_knobs import Policy

router = APIRouter(tags=["approvals"])
INTAKE_SCHEMA = "intake"


class ReviewBody(BaseModel):
    reason: Annotated[Detail, Field(min_length=1, description="why; recorded with the decision")]


class ReviewAccepted(BaseModel):
    task_id: str
    decision: ReviewDecision
    reviewer: str = Field(description="the actor recorded with the decision")


class ReviewDecisionRecord(BaseModel):
    task_id: str
    name: str | None = Field(description="the task's name (None: not in the views yet)")
    project: str | None
    decision: ReviewDecision
    reviewer: str = Field(description="the actor the decision is recorded with")
    decided_at: datetime
    reason: str = Field(description="the reviewer's reason")


DECIDED_TYPES = {"task.approved": ReviewDecision.APPROVE, "task.denied": ReviewDecision.DENY}


@router.get("/approvals/decisions", response_model=list[ReviewDecisionRecord],
            summary="Approvals and denials of the last N days, newest first: who decided, when and why")  # fmt: skip
async def get_review_decisions(pool: Pool, _reader: Authenticated,
                               days: Annotated[int, Query(ge=1, le=366)] = 7) -> list[ReviewDecisionRecord]:  # fmt: skip
    try:
        rows = await load_review_decisions(pool, now_utc() - timedelta(days=days))
    except MISSING_TABLES:
        return []  # the ledger has not archived anything yet
    return [ReviewDecisionRecord(**row) for row in rows]


async def load_review_decisions(pool: asyncpg.Pool, since: datetime) -> list[dict[str, Any]]:
    """The dispatcher's `task.approved` / `task.denied` events from the audit archive (the decisions as
    carried out, with the reviewer as actor), with the task's name and project from the views."""
    rows = await pool.fetch(
        f"SELECT a.task_id, t.name, t.project, a.type, a.actor, a.occurred_at, a.body::jsonb -> 'data' AS data"
        f" FROM {AUDIT}.events a LEFT JOIN {VIEWS}.tasks t ON t.id = a.task_id"
        f" WHERE a.type = ANY($1::text[]) AND a.occurred_at >= $2 ORDER BY a.occurred_at DESC, a.seq DESC",
        list(DECIDED_TYPES), since,
    )  # fmt: skip
    return [_decision(row) for row in rows]


def _decision(row: asyncpg.Record) -> dict[str, Any]:
    data = row["data"] if isinstance(row["data"], dict) else json.loads(row["data"])
    return {"task_id": row["task_id"], "name": row["name"], "project": row["project"],
            "decision": DECIDED_TYPES[row["type"]], "reviewer": row["actor"], "decided_at": row["occurred_at"],
            "reason": data.get("note") or data.get("reason") or ""}  # fmt: skip


@router.post("/tasks/{task_id}/approve", status_code=202, response_model=ReviewAccepted,
             summary="Approve a task that waits for approval (reviewer of its project, not its submitter)")  # fmt: skip
async def approve(task_id: TaskIdPath, body: ReviewBody, request: Request, pool: Pool,
                  principal: Authenticated) -> ReviewAccepted:  # fmt: skip
    return await _review(request, pool, principal, task_id, ReviewDecision.APPROVE, body.reason)


@router.post("/tasks/{task_id}/deny", status_code=202, response_model=ReviewAccepted,
             summary="Deny a task that waits for approval: it will not run (reviewer of its project)")  # fmt: skip
async def deny(task_id: TaskIdPath, body: ReviewBody, request: Request, pool: Pool,
               principal: Authenticated) -> ReviewAccepted:  # fmt: skip
    return await _review(request, pool, principal, task_id, ReviewDecision.DENY, body.reason)


async def _review(request: Request, pool: Pool, principal: Principal, task_id: str, decision: ReviewDecision,
                  reason: str) -> ReviewAccepted:  # fmt: skip
    view = await load_task(pool, task_id)
    if view is None:
        raise HTTPException(404, f"no task with id {task_id!r} in the views (if it was submitted a moment ago, retry)")
    require(principal, Role.REVIEWER, project=view.project)
    check_reviewer(principal, view, await policy_document(request))
    if not awaits_approval(view):
        raise HTTPException(409, f"task {task_id} does not wait for approval: it is {view.state.value}"
                                 f" ({view.reason}{': ' + view.reason_detail if view.reason_detail else ''})")
    emitter = Emitter(INTAKE_SCHEMA, request.app.state.producer, principal.actor)
    data = {"task_id": task_id, "decision": decision, "reason": reason}
    async with pool.acquire() as conn, conn.transaction():
        await emitter.emit(conn, [Emission(TaskReviewed, task_subject(task_id), data)])
    return ReviewAccepted(task_id=task_id, decision=decision, reviewer=principal.actor)


def check_reviewer(principal: Principal, view: TaskView, document: PolicyDocument) -> None:
    """403 unless the caller may review this task: a listed reviewer of its project (any reviewer when
    none is listed; an admin always), and never the one who submitted it."""
    if view.submitted_by == principal.actor:
        raise HTTPException(403, f"forbidden: {principal.actor} submitted task {view.id}; a reviewer may not review"
                                 " their own task")
    named = document.reviewers.of(view.project or "")
    if named and principal.name not in named and principal.role is not Role.ADMIN:
        raise HTTPException(403, f"forbidden: the reviewers of project {view.project} are {', '.join(named)}; "
                                 f"token {principal.name!r} is not one of them")


def awaits_approval(view: TaskView) -> bool:
    return view.state is TaskState.HELD and view.reason == DeferralReason.NOT_APPROVED.value


async def policy_document(request: Request) -> PolicyDocument:
    """The policy document in force (the console's holder, refreshed per request)."""
    holder: DocumentHolder[PolicyInForce] | None = getattr(request.app.state, "policy_in_force", None)
    if holder is None:
        holder = request.app.state.policy_in_force = policy_in_force_holder(fallback=Policy())
    await holder.refresh(request.app.state.pool)
    return holder.value.document
