"""`POST /v1/agents` (admin): enrol a GPU host's agent — its own Redis user, the password shown once;
`DELETE /v1/agents/{agent_id}` (admin): unenrol it — the user deleted, its password refused;
`GET /v1/agents` (admin): every agent enrolled through cardflow, by whom, when and why.

See `services.identity.agents` for what is made or deleted and why the console may lack the right
(then 409 with the commands an admin runs instead). Recorded as `agent.enrolled` /
`agent.unenrolled` with the admin as actor and the reason.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import BaseModel, Field
from redis.exceptions import RedisError

from services.common.runtime import Emitter
from services.console.auth import requires
from services.identity.agents import (
    EnrolmentUnavailable,
    UnknownAgentError,
    enroll_agent,
    finish_unenrolments,
    load_agent_records,
    unenroll_agent,
)
from services.identity.tokens import SCHEMA
from shared.events.values import Detail
from shared.logging import get_logger
from shared.identity import Principal, Role
from shared.redis_acl import SAFE_NAME
from shared.settings import Settings

log = get_logger(__name__)

router = APIRouter(prefix="/v1", tags=["agents"])
Admin = Annotated[Principal, requires(Role.ADMIN)]
AgentIdPath = Annotated[str, Path(pattern=SAFE_NAME.pattern, description="the agent's id (`cardflow agent --id`)")]


class EnrolBody(BaseModel):
    agent_id: str = Field(pattern=SAFE_NAME.pattern, description="the agent's id (`cardflow agent --id`): its inbox is cf:agent:<id>")
    reason: Detail = Field(min_length=1, description="why, recorded in the agent.enrolled event")


class UnenrolBody(BaseModel):
    reason: Detail = Field(min_length=1, description="why, recorded in the agent.unenrolled event")


class Enrolled(BaseModel):
    agent_id: str
    redis_user: str = Field(description="agent.<id>: reads only its own inbox, appends to cf:reports")
    password: str = Field(description="shown only now; enrolling the agent again makes a new one")
    redis_url: str = Field(description="CARDFLOW_REDIS_URL for the agent (the host as this console reaches Redis)")
    saved: bool = Field(description="Redis wrote the user to its ACL file (else it is lost when Redis restarts)")


@router.post(
    "/agents", status_code=201, response_model=Enrolled,
    responses={409: {"description": "this console may not make Redis users: the detail says which commands to run instead"}},
    summary="Enrol an agent: its own Redis user with a new password, shown once (admin)",
)  # fmt: skip
async def post_agent(body: EnrolBody, request: Request, admin: Admin) -> Enrolled:
    settings = request.app.state.settings
    enrolment = enrolment_url(settings)
    emitter = Emitter(SCHEMA, request.app.state.producer, admin.actor)
    try:
        async with request.app.state.pool.acquire() as conn, conn.transaction():
            enrolled = await enroll_agent(conn, emitter, enrolment, settings.redis_users_file, body.agent_id, body.reason)
    except EnrolmentUnavailable as unavailable:
        raise HTTPException(409, str(unavailable)) from None
    return Enrolled(agent_id=enrolled.agent_id, redis_user=enrolled.redis_user, password=enrolled.password,
                    redis_url=enrolled.redis_url, saved=enrolled.saved)  # fmt: skip


class Unenrolled(BaseModel):
    agent_id: str
    redis_user: str = Field(description="agent.<id>, deleted: its password is refused and its connections are closed")
    saved: bool = Field(description="Redis wrote its ACL file without the user (else a user kept in redis.conf comes back when Redis restarts)")
    event_id: str = Field(description="the agent.unenrolled event")
    already_deleted: bool = Field(False, description="Redis had no such user any more (deleted by hand, or by an "
                                                     "earlier unenrolment whose record was lost): only the record was made now")


@router.delete(
    "/agents/{agent_id}", response_model=Unenrolled,
    responses={404: {"description": "no agent with this id is enrolled: nothing deleted, nothing recorded"},
               409: {"description": "this console may not delete Redis users: the detail says which commands to run instead"}},
    summary="Unenrol an agent: delete its Redis user; its leases expire unrenewed and their tasks are requeued (admin)",
)  # fmt: skip
async def delete_agent(agent_id: AgentIdPath, body: UnenrolBody, request: Request, admin: Admin) -> Unenrolled:
    settings = request.app.state.settings
    enrolment = enrolment_url(settings)
    emitter = Emitter(SCHEMA, request.app.state.producer, admin.actor)
    await finish_unenrolments_of(request.app)
    try:
        gone = await unenroll_agent(request.app.state.pool, emitter, enrolment, settings.redis_users_file, agent_id, body.reason)
    except EnrolmentUnavailable as unavailable:
        raise HTTPException(409, str(unavailable)) from None
    except UnknownAgentError as unknown:
        raise HTTPException(404, str(unknown)) from None
    return Unenrolled(agent_id=gone.agent_id, redis_user=gone.redis_user, saved=gone.saved, event_id=gone.event_id,
                      already_deleted=gone.already_deleted)


class AgentRecordOut(BaseModel):
    agent_id: str
    redis_user: str
    enrolled_at: datetime
    enrolled_by: str = Field(description="who enrolled it last (user:<name>)")
    enrol_reason: str
    unenrolled_at: datetime | None = Field(description="null while enrolled")
    unenrolled_by: str | None
    unenrol_reason: str | None


@router.get("/agents", response_model=list[AgentRecordOut],
            summary="Every agent enrolled through cardflow: who enrolled it, when and why; who unenrolled it (admin)")
async def get_agents(request: Request, _admin: Admin) -> list[AgentRecordOut]:
    await finish_unenrolments_of(request.app)  # an unenrolment whose record failed is listed as it happened
    async with request.app.state.pool.acquire() as conn:
        records = await load_agent_records(conn)
    return [AgentRecordOut(**asdict(record)) for record in records]


async def finish_unenrolments_of(app: Any) -> None:
    """`finish_unenrolments` with this console's enrolment URL (at start, and before agents are listed
    or unenrolled); Redis unreachable: logged, and the next call tries again."""
    try:
        finished = await finish_unenrolments(app.state.pool, enrolment_url(app.state.settings), app.state.producer)
    except (OSError, RedisError):
        log.warning("pending unenrolments not checked now; the next listing of agents tries again", exc_info=True)
        return
    for done in finished:
        log.warning("an unenrolment whose record had failed is recorded now", agent_id=done.agent_id,
                    event_id=done.event_id)  # fmt: skip


def enrolment_url(settings: Settings) -> str | None:
    """The Redis admin URL this console makes and deletes agent users with, if it has one."""
    return settings.agent_enrolment_redis_url.get_secret_value() if settings.agent_enrolment_redis_url else None
