"""PostgreSQL roles per service (issue 15: "`cardflow quota grant` works for anyone with the database
URL"): each service connects as its own role, which owns its schema and may not write another's.

The roles are made by the session's embedded PostgreSQL exactly as `cardflow up` makes them
(shared.embedded.pg_users, shared.pg_roles); each test applies the grants to its own database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from services.common.runtime import prepare_schema
from services.config.service import SPEC as CONFIG
from services.dispatcher.service import SPEC as DISPATCHER
from services.ledger.service import SPEC as LEDGER
from services.matcher.service import SPEC as MATCHER
from shared.delivery.db import create_pool
from shared.embedded.pg_users import apply_roles, load_or_create_role_passwords, role_dsn
from shared.pg_roles import SERVICE_ROLES, role_name
from shared.settings import Settings
from tests.helpers.system import ALL_SERVICES, RunningSystem, running_system


@asynccontextmanager
async def as_role(settings: Settings, service: str) -> AsyncIterator[asyncpg.Pool]:
    passwords = load_or_create_role_passwords(Path(settings.data_dir))
    pool = await create_pool(role_dsn(settings.database_dsn or "", service, passwords[service]), min_size=1, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


async def test_a_services_role_owns_its_schema_and_cannot_write_another(fresh_settings: Settings) -> None:
    await apply_roles(fresh_settings.database_dsn or "", load_or_create_role_passwords(Path(fresh_settings.data_dir)))
    for spec in (CONFIG, DISPATCHER, MATCHER):  # each migrates its own schema as its own role, as at start-up
        async with as_role(fresh_settings, spec.name) as pool:
            await prepare_schema(pool, spec)
    async with as_role(fresh_settings, "matcher") as matcher:
        assert await matcher.fetchval("SELECT count(*) FROM config.versions") == 0  # reads the catalog in force
        await matcher.execute("INSERT INTO matcher.inbox (consumer, event_id) VALUES ('t', 'e1')")
        refused = [
            "INSERT INTO dispatcher.inbox (consumer, event_id) VALUES ('t', 'e1')",
            "UPDATE dispatcher.tasks SET state = 'succeeded'",
            "DELETE FROM dispatcher.outbox",
            "SELECT * FROM dispatcher.tasks",
            "INSERT INTO config.versions (name, version) VALUES ('policy', 99)",
            "CREATE TABLE dispatcher.intruder (x int)",
            "DROP TABLE config.versions",
        ]
        for statement in refused:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await matcher.execute(statement)
    async with as_role(fresh_settings, "dispatcher") as dispatcher:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await dispatcher.execute("INSERT INTO matcher.inbox (consumer, event_id) VALUES ('t', 'e2')")
        assert await dispatcher.fetchval("SELECT count(*) FROM config.versions") == 0


async def test_the_console_runs_other_schemas_commands_only_through_their_roles(fresh_settings: Settings) -> None:
    await apply_roles(fresh_settings.database_dsn or "", load_or_create_role_passwords(Path(fresh_settings.data_dir)))
    async with as_role(fresh_settings, "console") as console:
        members = await console.fetch(
            "SELECT b.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member JOIN pg_roles b ON b.oid = m.roleid"
            " WHERE r.rolname = $1", role_name("console"),
        )  # fmt: skip
        assert {row["rolname"] for row in members} == {role_name(s) for s in SERVICE_ROLES["console"].member_of}
        for schema in ("dispatcher", "matcher", "readiness"):
            assert not await console.fetchval("SELECT has_schema_privilege($1, $2, 'CREATE')", role_name("console"), schema)


async def test_the_roles_are_made_once_per_data_dir_and_kept(fresh_settings: Settings) -> None:
    first = load_or_create_role_passwords(Path(fresh_settings.data_dir))
    assert load_or_create_role_passwords(Path(fresh_settings.data_dir)) == first
    assert set(first) == set(SERVICE_ROLES)
    assert (Path(fresh_settings.data_dir) / "postgres-roles.json").stat().st_mode & 0o777 == 0o600


async def test_every_service_of_a_running_system_connects_as_its_own_role(fresh_settings: Settings, tmp_path: Path) -> None:
    async with running_system(fresh_settings, tmp_path) as system:

        async def roles_connected(running: RunningSystem) -> set[str]:
            rows = await running.pool.fetch(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE 'cardflow\\_%'"
            )
            connected = {row["usename"] for row in rows}
            return connected if connected >= {role_name(service) for service in ALL_SERVICES} else set()

        assert await system.wait_for(roles_connected, what="every service connected as its own role")


async def test_a_schema_prepared_by_a_member_role_belongs_to_its_owner(fresh_settings: Settings) -> None:
    await apply_roles(fresh_settings.database_dsn or "", load_or_create_role_passwords(Path(fresh_settings.data_dir)))
    async with as_role(fresh_settings, "console") as console:  # the console prepares the ledger's schema at start
        await prepare_schema(console, LEDGER)
    async with as_role(fresh_settings, "ledger") as ledger:
        owners = await ledger.fetch("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'ledger'")
        assert {row["tableowner"] for row in owners} == {role_name("ledger")}
        await ledger.execute("INSERT INTO ledger.inbox (consumer, event_id) VALUES ('t', 'e1')")


async def test_tables_made_before_the_roles_are_handed_over_with_their_serial_sequences(fresh_settings: Settings) -> None:
    """Found by the OpenAPI fuzz run: a schema migrated by the database owner before the roles
    existed (a token bootstrapped first, or a data directory from before the roles) made every later
    `apply_roles` fail with "cannot change owner of sequence ... linked to table" — an identity
    column's sequence follows its table and may not be handed over on its own."""
    owner = await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=1)
    try:
        await prepare_schema(owner, CONFIG)
    finally:
        await owner.close()
    await apply_roles(fresh_settings.database_dsn or "", load_or_create_role_passwords(Path(fresh_settings.data_dir)))
    async with as_role(fresh_settings, "config") as config:
        owners = await config.fetch(
            "SELECT DISTINCT pg_get_userbyid(c.relowner) AS owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'config' AND c.relkind IN ('r', 'S')"
        )
        assert {row["owner"] for row in owners} == {role_name("config")}
