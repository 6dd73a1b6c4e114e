"""Token endpoints: create, list and revoke API tokens (admin), and `whoami` (any valid token).

`POST /v1/tokens` answers the secret once; only its SHA-256 is stored. Each change is a row in
schema `identity` plus its `token.created` / `token.revoked` event, recorded with the admin as actor.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Query, Request
from pydantic import BaseModel, Field

from services.common.runtime import Emitter
from services.console.auth import Authenticated, requires
from services.identity.tokens import SCHEMA, IssuedToken, TokenInfo, TokenRequest, create_token, list_tokens, revoke_tokens
from shared.events.values import Detail
from shared.identity import Principal, Role

router = APIRouter(prefix="/v1", tags=["tokens"])
Admin = Annotated[Principal, requires(Role.ADMIN)]


class RevokeBody(BaseModel):
    reason: Detail = Field("", description="why, recorded in the token.revoked event")


class Revoked(BaseModel):
    revoked: list[TokenInfo]


class WhoAmI(BaseModel):
    name: str
    role: Role
    project: str | None
    actor: str = Field(description="what events record for your actions")


def identity_emitter(request: Request, principal: Principal) -> Emitter:
    return Emitter(SCHEMA, request.app.state.producer, principal.actor)


@router.post("/tokens", status_code=201, response_model=IssuedToken, summary="Create a token (admin); the secret is shown once")
async def post_token(body: TokenRequest, request: Request, admin: Admin) -> IssuedToken:
    async with request.app.state.pool.acquire() as conn, conn.transaction():
        return await create_token(conn, identity_emitter(request, admin), body)


@router.get("/tokens", response_model=list[TokenInfo], summary="Tokens, oldest first (admin); never their secrets")
async def get_tokens(
    request: Request, _admin: Admin, include_revoked: Annotated[bool, Query(description="also revoked tokens")] = False
) -> list[TokenInfo]:
    return await list_tokens(request.app.state.pool, include_revoked=include_revoked)


@router.post(
    "/tokens/{ref}/revoke", response_model=Revoked, responses={404: {"description": "no active token has this id or name"}},
    summary="Revoke the token with this id, or every active token with this name (admin)",
)  # fmt: skip
async def revoke_token(ref: str, request: Request, admin: Admin, body: Annotated[RevokeBody | None, Body()] = None) -> Revoked:
    async with request.app.state.pool.acquire() as conn, conn.transaction():
        revoked = await revoke_tokens(conn, identity_emitter(request, admin), ref, reason=body.reason if body else "")
    if not revoked:
        raise HTTPException(404, f"no active token has the id or name {ref!r}; nothing revoked (`cardflow token list`)")
    return Revoked(revoked=revoked)


@router.get("/whoami", response_model=WhoAmI, summary="The caller's token: name, role, project")
async def whoami(principal: Authenticated) -> WhoAmI:
    return WhoAmI(name=principal.name, role=principal.role, project=principal.project, actor=principal.actor)
