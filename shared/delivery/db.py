"""The asyncpg connection pool every service uses, with JSON codecs, and schema-name quoting.

`create_pool` is called in a service's lifespan (never at import time). json/jsonb columns
read and write plain Python values (dict, list, str, numbers), so callers never dump JSON.

A released connection goes back to the pool without asyncpg's default reset query (`SELECT
pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`): that is one more round trip per
`pool.acquire()`, i.e. per handled batch, in every service. asyncpg still rolls back a transaction
left open and drops listener callbacks. Session-level state is therefore the taker's to undo:
`UNLISTEN` (the relay's `remove_listener`), `pg_advisory_unlock` after `pg_advisory_lock` (the
daily export), `SET LOCAL` rather than `SET` (the audit writer role). The dispatcher's leader lock
lives on a connection of its own, outside the pool.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import asyncpg

from shared.logging import get_logger

log = get_logger(__name__)

POOL_CLOSE_TIMEOUT_S = 10.0
"""How long a stopping process waits for its connections to come back before it cuts them."""

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def quote_schema(schema: str) -> str:
    """The schema as a quoted SQL identifier; refuses anything but lower-case snake names.

    Schema names are interpolated into SQL text (identifiers cannot be bind parameters), so
    they are validated strictly instead of escaped.
    """
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"invalid schema name {schema!r}: use [a-z_][a-z0-9_]*, at most 63 chars")
    return f'"{schema}"'


def _dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


async def init_connection(conn: asyncpg.Connection) -> None:
    """Register json and jsonb codecs on a new connection (used by the pool's `init`)."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(type_name, encoder=_dump_json, decoder=json.loads, schema="pg_catalog")


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset: nothing beyond asyncpg's own rollback (see the module docstring)."""


async def create_pool(
    dsn: str,
    *,
    min_size: int = 2,
    max_size: int = 10,
    command_timeout: float = 30.0,
    **options: Any,
) -> asyncpg.Pool:
    """An asyncpg pool with JSON codecs.

    Sizes: a service holds one connection for the relay's LISTEN, one per concurrently running
    handler and one for the relay's publishing; 10 covers that with room for bursts. Idle
    connections are closed after 5 minutes so managed databases do not keep them forever.
    """
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout,
        max_inactive_connection_lifetime=300.0,
        init=init_connection,
        reset=keep_session,
        **options,
    )
    assert pool is not None
    return pool


async def close_pool(pool: asyncpg.Pool, timeout_s: float = POOL_CLOSE_TIMEOUT_S) -> None:
    """Close `pool`, cutting its connections if some are not released within `timeout_s`.

    `Pool.close()` waits for every acquired connection to be released, without limit: a task that
    outlived its service's stop while holding one (a lost cancel, a library's unawaited consumer task)
    would keep the process from ever ending. After `timeout_s` the connections are terminated, which
    rolls back whatever transaction they held (nothing half-done is committed), and a warning says so.
    """
    in_use = pool.get_size() - pool.get_idle_size()
    try:
        async with asyncio.timeout(timeout_s):
            await pool.close()
    except TimeoutError:
        log.warning("connections not released in time; terminating them (their transactions roll back)",
                    in_use_at_close=in_use, waited_s=timeout_s)
        pool.terminate()
