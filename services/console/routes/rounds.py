"""Rounds and the match review: close a round with a note, amend it, read and compare reports;
one task's match in hindsight; every finished task's verdict.

    POST /v1/rounds/close            {note, reason}   (operator: the planners)  -> the closed round
    POST /v1/rounds/{id}/note        {note, reason}   (operator)                -> the note's new version
    GET  /v1/rounds                                   every closed round, oldest first
    GET  /v1/rounds/{id}                              one round: its report and every version of its note
    GET  /v1/rounds/compare?first=R1&second=R2        totals and spend per project / card / scenario, with the change
    GET  /v1/matches/{task_id}                        the ranking, and the verdict once the task finished
    GET  /v1/review?round=R&by=card|project|profile   verdicts grouped, cheapest output first; runtime ratios

Reads are open to any valid token (like the ledger); closing and amending need `operator`, and the
event records the caller as actor. Closing runs the ledger's own command (`services.ledger.rounds`)
with a ledger `Emitter`; the ledger service's relay publishes `round.closed`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from services.common.runtime import Emitter
from services.console.routes.common import NOT_FOUND, unprocessable
from services.console.auth import Authenticated, requires
from services.ledger.match_review import ReviewGrouping
from services.ledger.reviews import UnmatchedTaskError, review_matches, task_match
from services.ledger.rounds import RoundError, amend_note, close_round, compare_rounds, list_rounds, load_round
from services.ledger.service import LedgerSettings, RoundPeriods
from shared.events import utcnow
from shared.events.values import Detail
from shared.identity import Principal, Role
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
async def get_match(task_id: str, request: Request, _: Authenticated) -> dict[str, Any]:
    try:
        return await task_match(request.app.state.pool, task_id)
    except UnmatchedTaskError as exc:
        raise HTTPException(404, str(exc)) from None


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
