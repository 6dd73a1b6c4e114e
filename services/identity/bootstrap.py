"""The first admin token, for an embedded instance (`cardflow up`) and for a deployment of your own.

- `ensure_local_admin`: `cardflow up` calls it once the backends answer. The data directory keeps
  an admin token for the local user in `<data_dir>/admin.token` (0600). A token there that is
  still active is kept; otherwise (first start, a fresh database, a revoked token) a new one is
  created and written. `cardflow endpoints` points a second terminal at that file.
- `bootstrap_admin`: `cardflow token bootstrap NAME` on a deployment without embedded servers. It
  needs the database URL (whoever holds it can already change anything) and works only while no
  active admin token exists; after that, admins create tokens through the API.

Both record who did it as a `system:` actor (`system:up`, `system:bootstrap`): no token existed to
authenticate anyone yet.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from services.common.runtime import Emitter, prepare_schema
from services.identity.tokens import (
    IDENTITY_SPEC,
    SCHEMA,
    IssuedToken,
    TokenRequest,
    create_token,
    find_principal,
    has_active_admin,
)
from shared.delivery.db import create_pool
from shared.delivery.migrations import advisory_key
from shared.embedded.credentials import write_private
from shared.identity import Role

LOCAL_TOKEN_FILE = "admin.token"
LOCAL_ACTOR = "system:up"
BOOTSTRAP_ACTOR = "system:bootstrap"
_BOOTSTRAP_LOCK = advisory_key("bootstrap-admin", SCHEMA)


class AdminExists(RuntimeError):
    """`bootstrap_admin` refused: an active admin token exists; ask its holder for a token."""


@dataclass(frozen=True)
class LocalAdmin:
    """The embedded instance's admin token file, and whether this start created the token."""

    path: Path
    name: str
    created: bool


def local_token_path(data_dir: Path | str) -> Path:
    return Path(data_dir) / LOCAL_TOKEN_FILE


async def ensure_local_admin(database_url: str, data_dir: Path | str, name: str) -> LocalAdmin:
    """An active admin token in `<data_dir>/admin.token` (0600), created if missing or no longer valid."""
    path = local_token_path(data_dir)
    async with identity_pool(database_url) as pool:
        kept = await find_principal(pool, path.read_text().strip()) if path.exists() else None
        if kept is not None and kept.role is Role.ADMIN:
            return LocalAdmin(path, kept.name, created=False)
        request = TokenRequest(name=name, role=Role.ADMIN, reason="local admin of the embedded instance (cardflow up)")
        async with pool.acquire() as conn, conn.transaction():
            issued = await create_token(conn, system_emitter("up", LOCAL_ACTOR), request)
    write_private(path, issued.secret + "\n")
    return LocalAdmin(path, name, created=True)


async def bootstrap_admin(database_url: str, name: str, reason: str = "") -> IssuedToken:
    """The first admin token of an installation; `AdminExists` when there already is an active one."""
    async with identity_pool(database_url) as pool, pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _BOOTSTRAP_LOCK)
        if await has_active_admin(conn):
            raise AdminExists(
                "an active admin token exists already: ask its holder for a token"
                " (`cardflow token create NAME --role R`), or revoke it first"
            )
        request = TokenRequest(name=name, role=Role.ADMIN, reason=reason or "first admin (cardflow token bootstrap)")
        return await create_token(conn, system_emitter("cli", BOOTSTRAP_ACTOR), request)


@contextlib.asynccontextmanager
async def identity_pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A small pool on a database whose identity tables exist (created or upgraded here)."""
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        await prepare_schema(pool, IDENTITY_SPEC)
        yield pool
    finally:
        await pool.close()


def system_emitter(process: str, actor: str) -> Emitter:
    """The identity outbox's emitter for a `system:` actor (no token authenticated anyone)."""
    return Emitter(SCHEMA, f"{process}/{socket.gethostname()}", actor)
