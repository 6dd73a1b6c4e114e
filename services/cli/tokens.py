"""`cardflow token create|list|revoke|bootstrap` and `cardflow whoami`: API tokens and roles.

`create`, `list` and `revoke` are API calls (an admin token is needed); `create` prints the new
secret alone on stdout (`TOKEN=$(cardflow token create ci --role submitter)`), what it is on
stderr. `bootstrap` is the one exception that talks to PostgreSQL directly: it creates the first
admin token of a deployment and refuses once an active admin token exists (docs/identity.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from shared.identity import Role

console = Console()
errors = Console(stderr=True, soft_wrap=True)

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded in the event")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def register(app: typer.Typer) -> None:
    """Attach `token ...` and `whoami`."""
    token = typer.Typer(help="API tokens: create, list, revoke (admin); bootstrap the first admin.", no_args_is_help=True)
    app.add_typer(token, name="token")
    token.command("create")(create)
    token.command("list")(list_tokens)
    token.command("revoke")(revoke)
    token.command("bootstrap")(bootstrap)
    app.command("whoami")(whoami)


def create(
    name: Annotated[str, typer.Argument(help="the holder; what they do is recorded as user:NAME")],
    role: Annotated[Role, typer.Option("--role", help="what the token may do (docs/identity.md)")],
    project: Annotated[str | None, typer.Option("--project", help="limit it to this project")] = None,
    reason: ReasonOption = "",
    as_json: JsonOption = False,
) -> None:
    """Create an API token (admin). The secret is printed once, on stdout."""
    with cli_api() as api:
        issued = api.post("/v1/tokens", {"name": name, "role": role.value, "project": project, "reason": reason})
    if as_json:
        print(json.dumps(issued, indent=2))
        return
    info = issued["token"]
    scope = f" for project {info['project']}" if info["project"] else ""
    errors.print(f"created token {info['token_id']} for {info['name']}: role {info['role']}{scope}. "
                 "The secret below is shown only now; keep it like a password.")  # fmt: skip
    print(issued["secret"])


def list_tokens(
    include_revoked: Annotated[bool, typer.Option("--all", help="also revoked tokens")] = False,
    as_json: JsonOption = False,
) -> None:
    """Tokens, oldest first (admin): holder, role, project, who created them; never the secrets."""
    with cli_api() as api:
        rows = api.get("/v1/tokens", include_revoked=include_revoked or None)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    console.print(tokens_table(rows))


def revoke(
    ref: Annotated[str, typer.Argument(help="a token id, or a name (revokes every active token of that name)")],
    reason: ReasonOption = "",
) -> None:
    """Revoke tokens (admin): requests with them are refused from now on."""
    with cli_api() as api:
        answer = api.post(f"/v1/tokens/{ref}/revoke", {"reason": reason})
    for info in answer["revoked"]:
        console.print(f"revoked token {info['token_id']} of {info['name']} ({info['role']})")


def whoami(as_json: JsonOption = False) -> None:
    """The token this shell uses: its name, role and project."""
    with cli_api() as api:
        me = api.get("/v1/whoami")
    if as_json:
        print(json.dumps(me, indent=2))
        return
    scope = f" for project {me['project']}" if me["project"] else ""
    console.print(f"{me['actor']}: role {me['role']}{scope} (API {api.target.url})")


def bootstrap(
    name: Annotated[str, typer.Argument(help="the first admin's name")],
    reason: ReasonOption = "",
) -> None:
    """Create the first admin token, straight in PostgreSQL (needs CARDFLOW_DATABASE_URL; refused once an admin exists)."""
    from services.cli.views import resolve_settings
    from services.identity.bootstrap import AdminExists, bootstrap_admin
    from shared.logging import configure_logging

    configure_logging("WARNING")  # logs go to stderr: stdout carries the secret alone
    dsn = resolve_settings().database_dsn or ""
    try:
        issued = asyncio.run(bootstrap_admin(dsn, name, reason))
    except (AdminExists, ValueError) as exc:
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    errors.print(f"created admin token {issued.token.token_id} for {name}. The secret below is shown only now.")
    print(issued.secret)


def tokens_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"API tokens ({len(rows)})")
    for column in ("id", "name", "role", "project", "token", "created", "by", "reason", "revoked"):
        table.add_column(column, overflow="fold")
    for row in rows:
        revoked = f"{row['revoked_at'][:19]} by {row['revoked_by']}" if row.get("revoked_at") else ""
        table.add_row(row["token_id"], row["name"], row["role"], row["project"] or "every", row["hint"],
                      row["created_at"][:19], row["created_by"], row["reason"], revoked)  # fmt: skip
    return table
