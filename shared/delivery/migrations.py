"""Plain-SQL schema migrations: `<dir>/<NNN>_<name>.sql`, applied in order, recorded, checksummed.

`migrate(pool, schema, directory)` runs at every service start-up:

1. one transaction, serialised per schema by a PostgreSQL advisory lock, so several processes
   starting at once apply each file exactly once (the others wait, then find nothing to do);
2. creates the schema and its `schema_migrations` table if missing; when the schema is owned by a
   role the connected user is a member of (a service's own role, shared.pg_roles: the console
   prepares the identity and ledger schemas, an admin may run any), it acts as that owner, so what
   a migration creates belongs to the schema's owner and its service may use it;
3. refuses to start (`MigrationChecksumError`) when a file already applied has changed;
4. applies the pending files in version order with `search_path` set to the schema, so files
   use unqualified names and the same set can be installed in any schema; records each one.

All pending files of one call commit together or not at all. A file must not contain its own
BEGIN/COMMIT nor statements that cannot run in a transaction (CREATE INDEX CONCURRENTLY).
Several independent sets may live in one schema, told apart by `component` (the delivery
tables use `component="delivery"`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from shared.delivery.db import quote_schema
from shared.logging import get_logger

DELIVERY_MIGRATIONS = Path(__file__).parent / "sql"
"""The outbox, inbox and subject-sequence tables, installable in any schema."""

_FILE_NAME = re.compile(r"^(?P<version>\d{3,})_(?P<name>[a-z0-9_]+)\.sql$")

log = get_logger(__name__)


class MigrationError(RuntimeError):
    """The migration files or the recorded history are inconsistent; the service must not start."""


class MigrationChecksumError(MigrationError):
    """A file that was already applied has been edited since (add a new file instead)."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    checksum: str


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    component: str
    version: int
    name: str
    checksum: str
    applied_at: datetime


def load_migrations(directory: Path) -> list[Migration]:
    """Every `<NNN>_<name>.sql` file of `directory`, sorted by version; other files are ignored."""
    found: dict[int, Migration] = {}
    for path in sorted(Path(directory).iterdir()):
        match = _FILE_NAME.fullmatch(path.name)
        if not match or not path.is_file():
            continue
        version = int(match["version"])
        if version in found:
            raise MigrationError(f"two migrations with version {version} in {directory}")
        body = path.read_bytes()
        found[version] = Migration(version, match["name"], body.decode(), hashlib.sha256(body).hexdigest())
    return [found[v] for v in sorted(found)]


def advisory_key(purpose: str, schema: str) -> int:
    """A stable signed 64-bit advisory-lock key for (purpose, schema)."""
    digest = hashlib.sha256(f"cardflow:{purpose}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def migrate(
    pool: asyncpg.Pool, schema: str, directory: Path, *, component: str = "service"
) -> list[Migration]:
    """Apply the pending migrations of `directory` to `schema`; return the ones applied now."""
    migrations = load_migrations(directory)
    quoted = quote_schema(schema)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", advisory_key("migrate", schema))
        await _act_as_schema_owner(conn, schema)
        await _ensure_history_table(conn, quoted)
        applied = {m.version: m for m in await _load_applied(conn, quoted, component)}
        check_unchanged(migrations, applied, schema, component)
        pending = [m for m in migrations if m.version not in applied]
        await conn.execute(f"SET LOCAL search_path TO {quoted}, public")
        for migration in pending:
            await _apply(conn, quoted, component, migration)
    if pending:
        log.info("migrations applied", schema=schema, component=component, versions=[m.version for m in pending])
    return pending


async def migrate_delivery(pool: asyncpg.Pool, schema: str) -> list[Migration]:
    """Install or upgrade the outbox, inbox and subject-sequence tables in `schema`."""
    return await migrate(pool, schema, DELIVERY_MIGRATIONS, component="delivery")


async def applied_migrations(conn: asyncpg.Connection | asyncpg.Pool, schema: str) -> list[AppliedMigration]:
    """The recorded history of `schema`, every component, oldest first."""
    rows = await conn.fetch(
        f"SELECT component, version, name, checksum, applied_at FROM {quote_schema(schema)}.schema_migrations"
        " ORDER BY applied_at, component, version"
    )
    return [AppliedMigration(**dict(row)) for row in rows]


def check_unchanged(
    migrations: list[Migration], applied: dict[int, AppliedMigration], schema: str, component: str
) -> None:
    """Raise if an applied file's checksum changed; warn about applied versions with no file."""
    on_disk = {m.version: m for m in migrations}
    for version, record in applied.items():
        current = on_disk.get(version)
        if current is None:
            log.warning("applied migration has no file", schema=schema, component=component, version=version)
        elif current.checksum != record.checksum:
            raise MigrationChecksumError(
                f"{schema}/{component} migration {version:03d}_{record.name} changed after it was applied "
                f"(recorded sha256 {record.checksum[:12]}…, file {current.checksum[:12]}…); "
                "never edit an applied migration, add a new file"
            )


async def _act_as_schema_owner(conn: asyncpg.Connection, schema: str) -> None:
    """SET LOCAL ROLE to the schema's owner when that is another role the connected user is a member of."""
    owner = await conn.fetchval(
        "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = $1"
        " AND pg_get_userbyid(nspowner) <> current_user AND pg_has_role(current_user, nspowner, 'MEMBER')",
        schema,
    )
    if owner is not None:
        await conn.execute(f'SET LOCAL ROLE "{owner}"')


async def _ensure_history_table(conn: asyncpg.Connection, quoted: str) -> None:
    await conn.execute(
        f"""
        CREATE SCHEMA IF NOT EXISTS {quoted};
        CREATE TABLE IF NOT EXISTS {quoted}.schema_migrations (
            component  text        NOT NULL,
            version    integer     NOT NULL,
            name       text        NOT NULL,
            checksum   text        NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (component, version)
        )
        """
    )


async def _load_applied(conn: asyncpg.Connection, quoted: str, component: str) -> list[AppliedMigration]:
    rows = await conn.fetch(
        f"SELECT component, version, name, checksum, applied_at FROM {quoted}.schema_migrations"
        " WHERE component = $1",
        component,
    )
    return [AppliedMigration(**dict(row)) for row in rows]


async def _apply(conn: asyncpg.Connection, quoted: str, component: str, migration: Migration) -> None:
    try:
        await conn.execute(migration.sql)
    except asyncpg.PostgresError as exc:
        raise MigrationError(f"migration {migration.version:03d}_{migration.name} failed: {exc}") from exc
    await conn.execute(
        f"INSERT INTO {quoted}.schema_migrations (component, version, name, checksum) VALUES ($1, $2, $3, $4)",
        component,
        migration.version,
        migration.name,
        migration.checksum,
    )
