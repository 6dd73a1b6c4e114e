"""The PostgreSQL role table (shared.pg_roles) as data: every schema has one owner, roles write only
what they own, and the SQL grants no write on another service's schema."""

from __future__ import annotations

from shared.names import SCHEMAS
from shared.pg_roles import SERVICE_ROLES, owner_of, role_name, roles_sql


def test_every_schema_has_exactly_one_owning_role() -> None:
    for schema in SCHEMAS:
        owners = [role.service for role in SERVICE_ROLES.values() if schema in role.owns]
        assert len(owners) == 1, f"schema {schema} is owned by {owners}"
        assert owner_of(schema).service == owners[0]


def test_the_sql_grants_other_schemas_only_select() -> None:
    statements = roles_sql({service: "pw" for service in SERVICE_ROLES}, "cardflow")
    grants_on_schemas = [s for s in statements if s.startswith("GRANT") and " ON " in s and "DATABASE" not in s]
    assert grants_on_schemas and all(s.startswith(("GRANT USAGE ON SCHEMA", "GRANT SELECT ON ALL TABLES")) for s in grants_on_schemas)
    defaults = [s for s in statements if s.startswith("ALTER DEFAULT PRIVILEGES")]
    assert defaults and all("GRANT SELECT ON TABLES" in s for s in defaults)


def test_only_the_console_inherits_other_services_roles() -> None:
    inheriting = {role.service: role.member_of for role in SERVICE_ROLES.values() if role.member_of}
    assert inheriting == {"console": ("intake", "ledger", "config", "views")}
    assert role_name("dispatcher") == "cardflow_dispatcher"
