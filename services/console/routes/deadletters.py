"""Dead-letter endpoints (operator role): list, show, replay, purge `cf:deadletter`.

Replay and purge need a `reason`; each is recorded as an event with the operator as actor
(`services.operator.deadletters`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from pydantic import BaseModel, Field, StringConstraints, model_validator
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from services.common.runtime import Emitter
from services.console.auth import requires
from services.console.routes.common import NOT_FOUND
from services.operator.deadletters import (
    DeadLetterView,
    NoSuchDeadLetter,
    list_deadletters,
    load_deadletter,
    purge,
    replay,
)
from shared.events.values import Detail
from shared.identity import Principal, Role

router = APIRouter(tags=["operator"])
Operator = Annotated[Principal, requires(Role.OPERATOR)]
INTAKE_SCHEMA = "intake"  # the command gateway's outbox carries operators' actions
STREAM_ID_PATTERN = r"^[0-9]{1,19}-[0-9]{1,19}$"  # a Redis stream id (two uint64s); anything else is a 422, not a Redis error
DeadLetterId = Annotated[str, Path(pattern=STREAM_ID_PATTERN, description="a dead-letter id, e.g. 1733000000000-0")]
StreamId = Annotated[str, StringConstraints(pattern=STREAM_ID_PATTERN)]


class ReplayBody(BaseModel):
    reason: Detail = Field(min_length=1, description="why the entry is replayed (recorded in the event)")


class PurgeBody(BaseModel):
    reason: Detail = Field(min_length=1, description="why the entries are purged (recorded in the events)")
    ids: list[StreamId] | None = Field(None, min_length=1, max_length=1000, description="the dead-letter ids to purge")
    dead_before: datetime | None = Field(None, description="purge every entry dead-lettered before this time")

    @model_validator(mode="after")
    def one_selection(self) -> PurgeBody:
        if (self.ids is None) == (self.dead_before is None):
            raise ValueError("give exactly one of `ids` or `dead_before`")
        return self


@contextlib.asynccontextmanager
async def redis_of(request: Request) -> AsyncIterator[Redis]:
    url = request.app.state.settings.redis_url
    if not url:
        raise HTTPException(503, "the console has no Redis configured (CARDFLOW_REDIS_URL)")
    redis = Redis.from_url(url)
    try:
        yield redis
    finally:
        await redis.aclose()


def emitter(request: Request, operator: Principal) -> Emitter:
    return Emitter(INTAKE_SCHEMA, request.app.state.producer, operator.actor)


@router.get("/deadletters", summary="Dead-letter entries, oldest first (operator)")
async def get_deadletters(
    request: Request, _operator: Operator,
    stream: Annotated[str | None, Query(description="only entries from this stream, e.g. cf:ingest")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:  # fmt: skip
    async with redis_of(request) as redis:
        return [asdict(view) for view in await list_deadletters(redis, stream=stream, limit=limit)]


@router.get("/deadletters/{deadletter_id}", summary="One dead-letter entry with its original fields (operator)")
async def get_deadletter(deadletter_id: DeadLetterId, request: Request, _operator: Operator) -> dict[str, Any]:
    async with redis_of(request) as redis:
        try:
            return asdict(DeadLetterView.of(await load_deadletter(redis, deadletter_id)))
        except NoSuchDeadLetter:
            raise _missing(deadletter_id) from None


@router.post("/deadletters/{deadletter_id}/replay", summary="Put a dead entry back on its stream (operator)")
async def post_replay(deadletter_id: DeadLetterId, body: ReplayBody, request: Request, operator: Operator) -> dict[str, Any]:
    async with redis_of(request) as redis, request.app.state.pool.acquire() as conn, conn.transaction():
        try:
            event = await replay(conn, redis, emitter(request, operator), deadletter_id, body.reason)
        except NoSuchDeadLetter:
            raise _missing(deadletter_id) from None
        except NoPermissionError:  # the console's Redis user may append to cf:ingest* only (shared.redis_acl)
            raise HTTPException(403, f"dead-letter entry {deadletter_id!r} cannot be replayed by the console: its Redis user may"
                                     " append to cf:ingest and cf:ingest:<name> only (other streams are written by their owners alone;"
                                     " docs/running.md#security)") from None
    return {"event_id": event.event_id, **event.data.model_dump()}


@router.post("/deadletters/purge", responses=NOT_FOUND, summary="Delete dead entries for good (operator)")
async def post_purge(body: PurgeBody, request: Request, operator: Operator) -> dict[str, Any]:
    async with redis_of(request) as redis, request.app.state.pool.acquire() as conn, conn.transaction():
        try:
            events = await purge(conn, redis, emitter(request, operator), reason=body.reason, ids=body.ids,
                                 dead_before=body.dead_before)  # fmt: skip
        except NoSuchDeadLetter as exc:
            raise _missing(str(exc.args[0])) from None
    return {"purged": [event.data.deadletter_id for event in events]}


def _missing(deadletter_id: str) -> HTTPException:
    return HTTPException(404, f"no dead-letter entry {deadletter_id!r} (replayed or purged already? `cardflow deadletter list`)")
