"""API tokens in schema `identity`: create, revoke, list, and find the principal behind a secret.

    issued = await create_token(conn, emitter, TokenRequest(name="alice", role=Role.SUBMITTER, project="nlp"))
    issued.secret                       # shown once; only its SHA-256 is stored
    await find_principal(pool, secret)  # Principal("alice", Role.SUBMITTER, "nlp"), None if unknown or revoked
    await revoke_tokens(conn, emitter, "alice", reason="left the team")   # by token id or by name

Each change writes its row and its event (`token.created` / `token.revoked`) in the caller's
transaction, through an `identity` `Emitter` whose actor is whoever asked. The console process
owns the schema: it applies the migrations (`IDENTITY_SPEC`) and relays the outbox.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from pathlib import Path

import asyncpg
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from services.common.runtime import Emitter, ServiceContext, ServiceSpec
from shared.events import Emission, TokenCreated, TokenRevoked, new_event_id
from shared.events.subjects import token_subject
from shared.events.values import Detail, EntityId
from shared.identity import TOKEN_PREFIX, Principal, Role, check_token_name, hash_token, token_hint

SCHEMA = "identity"
MIGRATIONS = Path(__file__).parent / "sql"


async def _no_subscribers(ctx: ServiceContext) -> None:
    """The identity schema has tables and an outbox, but no stream to consume."""


IDENTITY_SPEC = ServiceSpec(name="identity", schema=SCHEMA, migrations=MIGRATIONS, setup=_no_subscribers)
"""What `prepare_schema` needs to create or upgrade the identity tables (used by the console and `cardflow up`)."""

_COLUMNS = "token_id, name, role, project, hint, created_at, created_by, reason, revoked_at, revoked_by, revoke_reason"


class TokenRequest(BaseModel):
    """What a new token should be: the holder's name, a role, optionally one project, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="the holder; what they do is recorded as user:<name>")
    role: Role
    project: EntityId | None = Field(None, description="the only project the token may act on; omit for every project")
    reason: Detail = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_token_name(value)

    @model_validator(mode="after")
    def _admin_everywhere(self) -> TokenRequest:
        if self.role is Role.ADMIN and self.project is not None:
            raise ValueError("an admin token acts on every project: leave out project")
        return self


class TokenInfo(BaseModel):
    """A token as listings show it (never its secret)."""

    token_id: str
    name: str
    role: Role
    project: str | None
    hint: str = Field(description="the secret's first characters")
    created_at: datetime
    created_by: str
    reason: str
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class IssuedToken(BaseModel):
    """A token just created: its record and, this once, its secret."""

    token: TokenInfo
    secret: str


def new_secret() -> str:
    """A fresh token: the prefix and 32 random bytes, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def create_token(conn: asyncpg.Connection, emitter: Emitter, request: TokenRequest) -> IssuedToken:
    """Store a new token and emit `token.created` (in the caller's transaction); the secret is returned once."""
    token_id, secret = new_event_id(), new_secret()
    data = {"token_id": token_id, "name": request.name, "role": request.role, "project": request.project,
            "reason": request.reason}  # fmt: skip
    [event] = await emitter.emit(conn, [Emission(TokenCreated, token_subject(token_id), data)])
    row = await conn.fetchrow(
        f"INSERT INTO {SCHEMA}.tokens (token_id, name, role, project, secret_sha256, hint, created_at, created_by,"
        f" reason, event_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING {_COLUMNS}",
        token_id, request.name, request.role.value, request.project, hash_token(secret), token_hint(secret),
        event.occurred_at, event.actor, request.reason, event.event_id,
    )  # fmt: skip
    return IssuedToken(token=TokenInfo(**dict(row)), secret=secret)


async def revoke_tokens(conn: asyncpg.Connection, emitter: Emitter, ref: str, *, reason: str = "") -> list[TokenInfo]:
    """Revoke the active token with id `ref`, or every active token named `ref`; emits one
    `token.revoked` each. Returns what was revoked (empty: nothing active matched)."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM {SCHEMA}.tokens WHERE (token_id = $1 OR name = $1) AND revoked_at IS NULL"
        " ORDER BY token_id FOR UPDATE",
        ref,
    )
    revoked = []
    for row in rows:
        data = {"token_id": row["token_id"], "name": row["name"], "reason": reason}
        [event] = await emitter.emit(conn, [Emission(TokenRevoked, token_subject(row["token_id"]), data)])
        updated = await conn.fetchrow(
            f"UPDATE {SCHEMA}.tokens SET revoked_at = $2, revoked_by = $3, revoke_reason = $4 WHERE token_id = $1"
            f" RETURNING {_COLUMNS}",
            row["token_id"], event.occurred_at, event.actor, reason,
        )  # fmt: skip
        revoked.append(TokenInfo(**dict(updated)))
    return revoked


async def list_tokens(conn: asyncpg.Connection | asyncpg.Pool, *, include_revoked: bool = False) -> list[TokenInfo]:
    """Every token (active ones only unless `include_revoked`), oldest first."""
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    rows = await conn.fetch(f"SELECT {_COLUMNS} FROM {SCHEMA}.tokens{where} ORDER BY created_at, token_id")
    return [TokenInfo(**dict(row)) for row in rows]


async def find_principal(conn: asyncpg.Connection | asyncpg.Pool, secret: str) -> Principal | None:
    """The holder of an active token with this secret, else None (unknown, malformed or revoked)."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    row = await conn.fetchrow(
        f"SELECT name, role, project FROM {SCHEMA}.tokens WHERE secret_sha256 = $1 AND revoked_at IS NULL",
        hash_token(secret),
    )
    return Principal(row["name"], Role(row["role"]), row["project"]) if row else None


async def has_active_admin(conn: asyncpg.Connection | asyncpg.Pool) -> bool:
    return bool(await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.tokens WHERE role = 'admin' AND revoked_at IS NULL)"))
