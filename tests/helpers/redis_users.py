"""Run test processes as their own Redis ACL users (shared.redis_acl) and PostgreSQL roles
(shared.pg_roles), as `cardflow up` does.

The session's embedded Redis has every system user (`service.<name>`, `gate`); `as_user` points a
`Settings` at one of them (same server and db), `enrolled_agent_url` enrolls an agent and returns
its URL. `acl_denials` reads the server's ACL LOG, so a harness can fail a test on any command a
process was refused — the proof that each user's rules cover what its process really does.
"""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from pydantic import SecretStr

from shared.embedded.pg_users import apply_roles, load_or_create_role_passwords, roles_path, service_dsn
from shared.embedded.redis_users import enroll, load_users
from shared.pg_roles import SERVICE_ROLES
from shared.redis_acl import agent_user, user_url
from shared.settings import Settings


def as_user(settings: Settings, user: str, users_dir: Path | None = None) -> Settings:
    """`settings` with the Redis URL of `user` when the session's Redis has that user, else unchanged."""
    stored = load_users(users_dir or settings.data_dir).get(user)
    if stored is None or not settings.redis_url:
        return settings
    return settings.model_copy(update={"redis_url": user_url(settings.redis_url, user, stored.password)})


def service_settings(settings: Settings, service: str, users_dir: Path | None = None, *, pg_role: bool = False) -> Settings:
    """`settings` for `service`: its own Redis user and, with `pg_role`, its own PostgreSQL role (the
    database must have had `shared.embedded.pg_users.apply_roles` run on it: `with_service_roles`)."""
    own = as_user(settings, f"service.{service}" if service != "gate" else "gate", users_dir)
    roles = roles_path(users_dir or settings.data_dir)
    if not pg_role or not roles.exists() or service not in SERVICE_ROLES:
        return own
    return own.model_copy(update={"database_url": SecretStr(service_dsn(roles, settings.database_dsn or "", service))})


async def with_service_roles(settings: Settings, users_dir: Path | None = None) -> bool:
    """Apply the service roles' grants to the test's database (as its owner); False when the session's
    PostgreSQL has no roles file (external backends)."""
    roles = roles_path(users_dir or settings.data_dir)
    if not roles.exists():
        return False
    await apply_roles(settings.database_dsn or "", load_or_create_role_passwords(roles.parent))
    return True


def enrolled_agent_url(admin_url: str, users_dir: Path, agent_id: str) -> str:
    """Enroll `agent_id` on the session's Redis (a new password each time) and return its URL."""
    return enroll(admin_url, users_dir, agent_user(agent_id))


async def acl_denials(admin: Redis) -> list[dict[str, object]]:
    """The ACL LOG entries (commands or keys refused to some user), newest first."""
    return [_decoded(entry) for entry in await admin.execute_command("ACL", "LOG")]


async def reset_acl_log(admin: Redis) -> None:
    await admin.execute_command("ACL", "LOG", "RESET")


def _decoded(entry: object) -> dict[str, object]:
    if isinstance(entry, dict):
        items = entry.items()
    else:  # RESP2: a flat list of key, value pairs
        flat = list(entry)  # type: ignore[call-overload]
        items = zip(flat[::2], flat[1::2], strict=True)
    return {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode(errors="replace") if isinstance(v, bytes) else v) for k, v in items}
