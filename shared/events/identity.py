"""Events about API tokens (one created, one revoked) and agents' Redis users (one enrolled, one
unenrolled); the console process owns schema `identity`.

No secret or password ever appears in an event; its holder's name does (`user:<name>` is the actor of
everything done with the token).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail, EntityId
from shared.identity import Role


class TokenCreatedData(Payload):
    token_id: EntityId
    name: str = Field(min_length=1, max_length=64, description="the holder; actions with it are recorded as user:<name>")
    role: Role
    project: EntityId | None = Field(None, description="the only project it may act on; None = every project")
    reason: Detail = ""


class TokenCreated(Envelope):
    """An API token was created (the envelope's actor is who created it)."""

    type: Literal["token.created"] = "token.created"
    data: TokenCreatedData


class TokenRevokedData(Payload):
    token_id: EntityId
    name: str = Field(min_length=1, max_length=64)
    reason: Detail = ""


class TokenRevoked(Envelope):
    """An API token was revoked: every request with it is refused from now on."""

    type: Literal["token.revoked"] = "token.revoked"
    data: TokenRevokedData


class AgentEnrolledData(Payload):
    agent_id: EntityId = Field(description="the agent's id: it reads only cf:agent:<id>")
    redis_user: str = Field(min_length=1, max_length=120, description="the Redis ACL user made for it: agent.<id>")
    reason: Detail = ""


class AgentEnrolled(Envelope):
    """A GPU host's agent got its own Redis user (a new password, shown once to the admin who asked;
    an agent enrolled again gets a new one and the old stops working)."""

    type: Literal["agent.enrolled"] = "agent.enrolled"
    data: AgentEnrolledData


class AgentUnenrolledData(Payload):
    agent_id: EntityId = Field(description="the agent's id")
    redis_user: str = Field(min_length=1, max_length=120, description="the Redis ACL user deleted: agent.<id>")
    reason: Detail = Field(min_length=1, description="why the agent lost its credential (a host decommissioned, a key leaked)")


class AgentUnenrolled(Envelope):
    """A GPU host's agent lost its Redis user: its password is refused from now on and its open
    connections are closed, so it can neither read its inbox nor report (its leases expire unrenewed
    and their tasks are requeued). Enrolling the id again makes a new user with a new password."""

    type: Literal["agent.unenrolled"] = "agent.unenrolled"
    data: AgentUnenrolledData
