"""`cardflow pg-roles`: the SQL that creates one PostgreSQL role per service on an external database.

The embedded PostgreSQL of `cardflow up` makes these roles itself (shared.embedded.pg_users). For
a managed PostgreSQL (Tianyi Cloud RDS for PostgreSQL, for one, whose admin account is not a
superuser) this prints `shared.pg_roles.roles_script` with a fresh password per role (printed as
comments for your secret store), ready for `psql "$ADMIN_URL" -f file` as the database owner (a
user with CREATEROLE; no superuser needed). It touches no backend.
"""

from __future__ import annotations

import secrets

import typer


def pg_roles_script(database: str) -> str:
    from shared.pg_roles import SERVICE_ROLES, role_name, roles_script

    passwords = {service: secrets.token_urlsafe(24) for service in SERVICE_ROLES}
    lines = [f"-- {role_name(service)} password: {password}" for service, password in passwords.items()]
    lines.append("-- then give each service CARDFLOW_DATABASE_URL=postgresql://<role>:<password>@host:port/" + database)
    return "\n".join(lines) + "\n" + roles_script(passwords, database)


def register(app: typer.Typer) -> None:
    @app.command("pg-roles")
    def pg_roles(
        database: str = typer.Option("cardflow", "--database", help="the database cardflow's schemas live in"),
    ) -> None:
        """Print the SQL (with new passwords) that makes one least-privilege PostgreSQL role per service."""
        typer.echo(pg_roles_script(database), nl=False)
