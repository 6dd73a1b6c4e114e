"""Rounds and the match review: close a round with a note, amend it, read and compare reports;
one task's match in hindsight; every finished task's verdict.

    POST /v1/rounds/close            {note, reason}   (operator: the planners)  -> the closed round
    POST /v1/rounds/{id}/note        {note, reason}   (operator)                -> the note's new version
    GET  /v1/rounds                                   every closed round, oldest first
    GET  /v1/rounds/{id}                              one round: its report and every version of its note
    GET  /v1/rounds/compare?first=R1&second=R2        totals and spend per project / card / scenario, with the change
    GET  /v1/matches/{task_id}                        the ranking, and the verdict once the task finished
    GET  /v1/review?round=R&by=card|project|profile   verdicts grouped, cheapest output first; runtime ratios
    POST /v1/review/{task_id}/clear-flag  {reason}    (reviewer of the task's project, as for approvals)
                                                      a person checked a flagged success's output -> 202

Reads are open to any valid token (like the ledger); closing and amending need `operator`, and the
event records the caller as actor. Clearing a flag needs what approving a task needs (role reviewer
or admin, a listed reviewer of the project, never the task's submitter); it appends
`task.flag_cleared` (intake's outbox, the caller as actor, with the reason) and the ledger moves the
held-back output into the counted totals, once (404 unknown task, 409 no flag left to clear). Closing runs the ledger's own command (`services.ledger.rounds`)
with a ledger `Emitter`; the ledger service's relay publishes `round.closed`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from services.common.runtime import Emitter
from services.console.routes.common import NOT_FOUND, Lang, unprocessable
from services.console.match_reading import match_sentence
from services.console.auth import Authenticated, requires
from services.console.routes.approvals import INTAKE_SCHEMA, check_reviewer, policy_document
from services.console.api import TaskIdPath
from services.console.views import MISSING_TABLES, load_task
from services.ledger.match_review import ReviewGrouping
from services.ledger.reviews import UnmatchedTaskError, review_matches, task_match
from services.ledger.rounds import RoundError, amend_note, close_round, compare_rounds, list_rounds, load_round
from services.ledger.service import LedgerSettings, RoundPeriods
from shared.events import TaskFlagCleared, utcnow
from shared.events.emission import Emission
from shared.events.subjects import task_subject
from shared.events.values import Detail
from shared.identity import Principal, Role, require
from shared.storage import ObjectStore, open_object_store

router = APIRouter(tags=["rounds"])
Planner = Annotated[Principal, requires(Role.OPERATOR)]
LEDGER_SCHEMA = "ledger"


class NoteBody(BaseModel):
    note: str = Field(min_length=1, max_length=2000, description="the one-line retrospective: what was worth it, what was not")
    reason: Detail = Field("", description="why (recorded with the note)")


@contextlib.asynccontextmanager
async def reports_store(request: Request) -> AsyncIterator[ObjectStore | None]:
    settings = request.app.state.settings
    if not settings.s3_endpoint:
        yield None
        return
    async with open_object_store(settings) as store:
        yield store


def ledger_emitter(request: Request, principal: Principal) -> Emitter:
    return Emitter(LEDGER_SCHEMA, request.app.state.producer, principal.actor)


@router.post("/rounds/close", status_code=201, summary="Close the open round now, with a note (operator)")
async def post_close(body: NoteBody, request: Request, principal: Planner) -> dict[str, Any]:
    periods = RoundPeriods(LedgerSettings())
    await periods.refresh(request.app.state.pool)
    async with reports_store(request) as store, request.app.state.pool.acquire() as conn:
        try:
            async with conn.transaction():
                closed = await close_round(conn, store, ledger_emitter(request, principal), actor=principal.actor,
                                           note=body.note, now=utcnow(), period=periods.value, reason=body.reason)  # fmt: skip
        except RoundError as exc:
            raise HTTPException(409, str(exc)) from None
    return await load_round(request.app.state.pool, closed.round_id)


@router.post("/rounds/{round_id}/note", summary="Amend a round's note; earlier versions are kept (operator)")
async def post_note(round_id: str, body: NoteBody, request: Request, principal: Planner) -> dict[str, Any]:
    async with reports_store(request) as store, request.app.state.pool.acquire() as conn:
        try:
            async with conn.transaction():
                version = await amend_note(conn, store, ledger_emitter(request, principal), round_id, body.note,
                                           actor=principal.actor, reason=body.reason, now=utcnow())  # fmt: skip
        except RoundError as exc:
            raise HTTPException(404, str(exc)) if "no round" in str(exc) else unprocessable(("body", "note"), str(exc)) from None
    return {"round_id": round_id, "version": version}


@router.get("/rounds", summary="Closed rounds, oldest first")
async def get_rounds(request: Request, _: Authenticated) -> list[dict[str, Any]]:
    return await list_rounds(request.app.state.pool)


@router.get("/rounds/compare", responses=NOT_FOUND, summary="Two rounds side by side")
async def get_compare(
    request: Request, _: Authenticated,
    first: Annotated[str, Query(description="a round id, e.g. R0001")], second: Annotated[str, Query()],
) -> dict[str, Any]:  # fmt: skip
    try:
        a, b = await load_round(request.app.state.pool, first), await load_round(request.app.state.pool, second)
    except RoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return compare_rounds(a, b)


@router.get("/rounds/{round_id}", summary="One round: its report and every version of its note")
async def get_round(round_id: str, request: Request, _: Authenticated) -> dict[str, Any]:
    try:
        return await load_round(request.app.state.pool, round_id)
    except RoundError as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/matches/{task_id}", summary="A task's match: the ranking, and in hindsight once it finished")
async def get_match(task_id: str, request: Request, _: Authenticated, lang: Lang = "en") -> dict[str, Any]:
    pool = request.app.state.pool
    try:
        found = await task_match(pool, task_id)
    except UnmatchedTaskError as exc:
        raise HTTPException(404, str(exc)) from None
    if lang != "en":
        found["why"] = await match_sentence(pool, found["match_event_id"], found["why"], lang)
    return found


@router.get("/review", responses=NOT_FOUND, summary="The match review: verdicts grouped, cheapest output first, runtime ratios")
async def get_review(
    request: Request, _: Authenticated,
    round: Annotated[str | None, Query(description="only tasks that finished in this round")] = None,  # noqa: A002
    by: Annotated[ReviewGrouping, Query()] = ReviewGrouping.CARD,
) -> dict[str, Any]:  # fmt: skip
    try:
        return await review_matches(request.app.state.pool, round_id=round, by=by)
    except RoundError as exc:
        raise HTTPException(404, str(exc)) from None


class ClearFlagBody(BaseModel):
    reason: Annotated[Detail, Field(min_length=1, description="what you checked; recorded with the clearing")]


class HeldOutput(BaseModel):
    lease_id: str
    output_units: float | None = Field(description="the output the ledger now counts (None: the run had none within the bound)")
    flags: list[str]


class FlagCleared(BaseModel):
    task_id: str
    cleared_by: str = Field(description="the actor recorded with the clearing")
    reason: str
    runs: list[HeldOutput] = Field(description="the flagged runs whose output the ledger moves into the counted totals")


NO_FLAG = {409: {"description": "the task has no flagged success left to clear"}}


@router.post("/review/{task_id}/clear-flag", status_code=202, response_model=FlagCleared, responses=NO_FLAG,
             summary="Clear a flagged success after checking its output: the ledger counts the output, once")  # fmt: skip
async def clear_flag(task_id: TaskIdPath, body: ClearFlagBody, request: Request, principal: Authenticated) -> FlagCleared:
    pool = request.app.state.pool
    view = await load_task(pool, task_id)
    if view is None:
        raise HTTPException(404, f"no task with id {task_id!r} in the views (if it was submitted a moment ago, retry)")
    require(principal, Role.REVIEWER, project=view.project)
    check_reviewer(principal, view, await policy_document(request))
    async with pool.acquire() as conn, conn.transaction():
        try:
            held = await conn.fetch(
                f"SELECT lease_id, output_units, flags FROM {LEDGER_SCHEMA}.flagged_output"
                " WHERE task_id = $1 AND cleared_at IS NULL ORDER BY lease_id FOR UPDATE", task_id,
            )  # fmt: skip
        except MISSING_TABLES:
            held = []  # the ledger has not run yet: nothing is flagged
        if not held:
            raise HTTPException(409, f"task {task_id} has no flagged success left to clear (its success was not flagged,"
                                     " or the flag was already cleared: `cardflow audit why` tells)")  # fmt: skip
        emitter = Emitter(INTAKE_SCHEMA, request.app.state.producer, principal.actor)
        await emitter.emit(conn, [Emission(TaskFlagCleared, task_subject(task_id), {"task_id": task_id, "reason": body.reason})])
    return FlagCleared(task_id=task_id, cleared_by=principal.actor, reason=body.reason,
                       runs=[HeldOutput(lease_id=r["lease_id"], flags=list(r["flags"]),
                                        output_units=None if r["output_units"] is None else float(r["output_units"]))
                             for r in held])  # fmt: skip
