"""PostgreSQL roles per service, least privilege, as data — and the SQL that makes them (pure).

Each service connects as `cardflow_<service>`, which OWNS its schema(s) (so its start-up
migrations create and alter its tables) and may only read the schemas it really reads:

| role | owns | reads | member of |
|---|---|---|---|
| `cardflow_intake` | intake | config (templates) | |
| `cardflow_readiness` | readiness | | |
| `cardflow_matcher` | matcher | config (the card catalog in force) | |
| `cardflow_dispatcher` | dispatcher | config (the policy in force) | |
| `cardflow_ledger` | ledger, audit | config (the round period in force) | `cardflow_audit_writer` (the archive's append-only writer) |
| `cardflow_views` | views | | |
| `cardflow_config` | config | intake, readiness, dispatcher, views (the daily export, what-if) | |
| `cardflow_console` | identity | every schema | `cardflow_intake`, `cardflow_ledger`, `cardflow_config` (the API runs their commands: submit/cancel/operator verbs, quota grants and rounds, config changes), `cardflow_views` (it prepares the views' tables at start, so pages answer before the projector ran) |
| `cardflow_gate` | | | (connects only; it works on Redis) |

A role may not write another service's schema: no INSERT/UPDATE/DELETE/TRUNCATE there, no DDL.
Every role may CREATE in the database (the migrations say `CREATE SCHEMA IF NOT EXISTS`), which
lets it add new schemas of its own, never touch others'.

`roles_sql(passwords, database)` is the whole set-up as idempotent statements: run it as the
database owner (no superuser needed; CREATEROLE is enough — the owner grants itself each role so
it may hand over existing tables and set default privileges). Embedded mode runs it at every start
(`shared.embedded.pg_users`); for a managed PostgreSQL `cardflow pg-roles` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.names import SCHEMAS

ROLE_PREFIX = "cardflow_"
AUDIT_WRITER = "cardflow_audit_writer"


@dataclass(frozen=True)
class ServiceRole:
    service: str
    owns: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    member_of: tuple[str, ...] = ()  # other services' roles (their privileges are inherited)

    @property
    def name(self) -> str:
        return role_name(self.service)


SERVICE_ROLES: dict[str, ServiceRole] = {
    role.service: role
    for role in (
        ServiceRole("intake", owns=("intake",), reads=("config",)),
        ServiceRole("readiness", owns=("readiness",)),
        ServiceRole("matcher", owns=("matcher",), reads=("config",)),
        ServiceRole("dispatcher", owns=("dispatcher",), reads=("config",)),
        ServiceRole("ledger", owns=("ledger", "audit"), reads=("config",)),
        ServiceRole("views", owns=("views",)),
        ServiceRole("config", owns=("config",), reads=("intake", "readiness", "dispatcher", "views")),
        ServiceRole("console", owns=("identity",), reads=tuple(SCHEMAS), member_of=("intake", "ledger", "config", "views")),
        ServiceRole("gate"),
    )
}


def role_name(service: str) -> str:
    return f"{ROLE_PREFIX}{service}"


def owner_of(schema: str) -> ServiceRole:
    return next(role for role in SERVICE_ROLES.values() if schema in role.owns)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _create_role(name: str, password: str | None) -> str:
    login = f"LOGIN PASSWORD {_literal(password)}" if password is not None else "NOLOGIN"
    return (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{name}') THEN CREATE ROLE {name} {login};"
        f" ELSE ALTER ROLE {name} {login}; END IF; END $$"
    )


def _hand_over(schema: str, owner: str) -> str:
    """Make `owner` own the schema and everything already in it (tables made by an earlier admin run)."""
    return (
        f"DO $$ DECLARE r record; BEGIN\n"
        f"  FOR r IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace\n"
        f"           WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')\n"
        # a serial/identity column's sequence follows its table (ALTER on it alone is refused)
        f"             AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass\n"
        f"                             AND d.objid = c.oid AND d.deptype IN ('a', 'i') AND c.relkind = 'S') LOOP\n"
        f"    EXECUTE format('ALTER %s {schema}.%I OWNER TO {owner}',\n"
        f"      CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END, r.relname);\n"
        f"  END LOOP;\n"
        f"  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace\n"
        f"           WHERE n.nspname = '{schema}' LOOP\n"
        f"    EXECUTE format('ALTER FUNCTION %s OWNER TO {owner}', r.fn);\n"
        f"  END LOOP;\n"
        f"END $$"
    )


def roles_sql(passwords: dict[str, str], database: str) -> list[str]:
    """Idempotent statements creating every role (LOGIN with `passwords[service]`), its schemas and grants."""
    statements = [_create_role(AUDIT_WRITER, None)]
    for role in SERVICE_ROLES.values():
        statements.append(_create_role(role.name, passwords[role.service]))
        statements.append(f"GRANT {role.name} TO CURRENT_USER")  # lets a non-superuser owner hand tables over
        statements.append(f'GRANT CONNECT, CREATE ON DATABASE "{database}" TO {role.name}')
    statements.append(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    for role in SERVICE_ROLES.values():
        for schema in role.owns:
            statements += [
                f"CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {role.name}",
                f"ALTER SCHEMA {schema} OWNER TO {role.name}",
                _hand_over(schema, role.name),
            ]
    for role in SERVICE_ROLES.values():
        for schema in role.reads:
            if schema in role.owns:
                continue
            owner = owner_of(schema).name
            statements += [
                f"GRANT USAGE ON SCHEMA {schema} TO {role.name}",
                f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role.name}",
                f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT SELECT ON TABLES TO {role.name}",
            ]
        statements += [f"GRANT {role_name(other)} TO {role.name}" for other in role.member_of]
    statements.append(f"GRANT {AUDIT_WRITER} TO {role_name('ledger')} WITH ADMIN OPTION")  # its migration grants it to itself
    return statements


def roles_script(passwords: dict[str, str], database: str) -> str:
    """`roles_sql` as a psql script (one statement per line block)."""
    header = "-- cardflow: one PostgreSQL role per service (shared/pg_roles.py). Run as the database owner.\n"
    return header + "".join(f"{statement};\n" for statement in roles_sql(passwords, database))
