"""`cardflow redis-users`: the ACL commands that create cardflow's Redis users on an external Redis.

The embedded Redis of `cardflow up` makes these users itself (shared.embedded.redis_users). For
a Redis you run or rent, this prints one `ACL SETUSER` per user with a fresh password (stored in
the command only as its SHA-256; the passwords are printed as comments for your secret store),
ready for `redis-cli --user default --pass ... < file`. It touches no backend.
"""

from __future__ import annotations

import secrets

import typer

from shared.redis_acl import RedisUser, agent_user, flattened, system_users, upstream_user


def acl_script(users: list[RedisUser], *, legacy: bool = False) -> str:
    """`# <user> password: ...` + `ACL SETUSER ...` lines (redis-cli syntax: selectors quoted)."""
    lines = ["# cardflow Redis users: run as an admin, e.g. redis-cli -u \"$ADMIN_URL\" < this-file",
             "# then give each process CARDFLOW_REDIS_URL=redis[s]://<user>:<password>@host:port/db (docs/running.md#security)"]  # fmt: skip
    for user in users:
        password = secrets.token_urlsafe(24)
        args = (flattened(user) if legacy else user).setuser_args(password)
        lines.append(f"# {user.name} password: {password}")
        lines.append(" ".join(["ACL", "SETUSER", *(f'"{arg}"' if " " in arg else arg for arg in args)]))
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    @app.command("redis-users")
    def redis_users(
        agent: list[str] = typer.Option([], "--agent", help="also a user for this agent id (repeatable)"),
        upstream: list[str] = typer.Option([], "--upstream", help="also a user for this upstream system (repeatable)"),
        legacy: bool = typer.Option(False, "--redis-6", help="rules for Redis 6.2 (no selectors: coarser, see docs)"),
        agents_only: bool = typer.Option(False, "--agents-only", help="only the --agent/--upstream users, not the services'"),
    ) -> None:
        """Print ACL SETUSER commands (with new passwords) for cardflow's Redis users on an external Redis."""
        users = [] if agents_only else system_users()
        users += [agent_user(name) for name in agent] + [upstream_user(name) for name in upstream]
        typer.echo(acl_script(users, legacy=legacy), nl=False)
