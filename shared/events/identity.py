"""Events about API tokens: one created, one revoked (the console process owns schema `identity`).

The secret itself never appears in an event; its holder's name does (`user:<name>` is the actor of
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
