"""The PostgreSQL roles of an embedded instance: one per service (shared.pg_roles), passwords in a 0600 file.

`<data_dir>/postgres-roles.json` (0600) keeps each service role's password (made once). After the
embedded PostgreSQL answers, `apply_roles` runs `shared.pg_roles.roles_sql` in the `cardflow`
database as its owner (idempotent: roles, schema ownership, grants). `role_dsn` is how
`cardflow up` hands each process its own login.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from shared.embedded.credentials import write_private
from shared.pg_roles import SERVICE_ROLES, role_name, roles_sql

ROLES_FILE = "postgres-roles.json"


def roles_path(data_dir: Path) -> Path:
    return Path(data_dir) / ROLES_FILE


def load_or_create_role_passwords(data_dir: Path) -> dict[str, str]:
    """Service -> password of its role, made on first use and kept."""
    path = roles_path(data_dir)
    passwords: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    missing = [service for service in SERVICE_ROLES if service not in passwords]
    if missing or not path.exists():
        passwords |= {service: secrets.token_urlsafe(24) for service in missing}
        write_private(path, json.dumps(passwords, indent=2, sort_keys=True))
    return passwords


async def apply_roles(admin_dsn: str, passwords: dict[str, str]) -> None:
    """Create or update every service role and its grants in the database of `admin_dsn`."""
    database = urlsplit(admin_dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('cardflow roles'))")  # one set-up at a time
            for statement in roles_sql(passwords, database):
                await conn.execute(statement)
    finally:
        await conn.close()


def role_dsn(admin_dsn: str, service: str, password: str) -> str:
    """`admin_dsn` with the service's role and password instead of the owner's (same host, db, options)."""
    parts = urlsplit(admin_dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role_name(service)}:{password}@{host}"))


def service_dsn(roles_file: Path | str | None, admin_dsn: str, service: str) -> str:
    """The DSN process `service` connects with: its own role when the embedded PostgreSQL made one
    (`Endpoints.postgres_roles_file`), else `admin_dsn` (an external database: docs/running.md#5-security)."""
    if not roles_file or service not in SERVICE_ROLES:
        return admin_dsn
    passwords = json.loads(Path(roles_file).read_text())
    return role_dsn(admin_dsn, service, passwords[service]) if service in passwords else admin_dsn
