"""Run test processes as their own Redis ACL users, as `cardflow up` does (shared.redis_acl).

The session's embedded Redis has every system user (`service.<name>`, `gate`); `as_user` points a
`Settings` at one of them (same server and db), `enrolled_agent_url` enrolls an agent and returns
its URL. `acl_denials` reads the server's ACL LOG, so a harness can fail a test on any command a
process was refused — the proof that each user's rules cover what its process really does.
"""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from shared.embedded.redis_users import enroll, load_users
from shared.redis_acl import agent_user, user_url
from shared.settings import Settings


def as_user(settings: Settings, user: str, users_dir: Path | None = None) -> Settings:
    """`settings` with the Redis URL of `user` when the session's Redis has that user, else unchanged."""
    stored = load_users(users_dir or settings.data_dir).get(user)
    if stored is None or not settings.redis_url:
        return settings
    return settings.model_copy(update={"redis_url": user_url(settings.redis_url, user, stored.password)})


def service_settings(settings: Settings, service: str, users_dir: Path | None = None) -> Settings:
    return as_user(settings, f"service.{service}" if service != "gate" else "gate", users_dir)


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
