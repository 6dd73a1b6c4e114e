"""The Redis users of an embedded instance: passwords in a 0600 file, rules in the server's ACL file.

`<data_dir>/redis-users.json` (0600) keeps every user this data directory created — the system
users (one per service process and the gate, made on first start) and the agents and upstreams
enrolled later (`enroll`) — as kind, name and password. The server's ACL file
(`<data_dir>/redis/users.acl`, 0600) is written from it at every start with the rules of THIS
code (`shared.redis_acl`), passwords only as SHA-256; an enrolment also applies the user to the
running server (`ACL SETUSER`) and saves the file (`ACL SAVE`), so a restarted server keeps it.
An unenrolled agent is dropped from the users file (`forget_user`), so no later start brings it back.

`user_url(users_file, admin_url, name)` (or `Endpoints.redis_url_for`) is how `cardflow up` hands
each process its own URL.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from shared.embedded.credentials import write_private
from shared.redis_acl import (
    RedisUser,
    RedisUserKind,
    admin_file_line,
    agent_user,
    gate_user,
    service_user,
    system_users,
    upstream_user,
)
from shared.redis_acl import user_url as _with_user

USERS_FILE = "redis-users.json"


@dataclass(frozen=True)
class StoredUser:
    kind: RedisUserKind
    subject: str  # service name, agent id, upstream name ("gate" for the gate)
    password: str

    def user(self) -> RedisUser:
        """The ACL user with the rules of this code."""
        return {
            RedisUserKind.SERVICE: service_user,
            RedisUserKind.AGENT: agent_user,
            RedisUserKind.UPSTREAM: upstream_user,
            RedisUserKind.GATE: lambda _: gate_user(),
        }[self.kind](self.subject)


def users_path(data_dir: Path) -> Path:
    return Path(data_dir) / USERS_FILE


def load_users(data_dir: Path) -> dict[str, StoredUser]:
    """User name -> stored user; empty when the data dir has none (Redis not embedded here)."""
    path = users_path(data_dir)
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {name: StoredUser(RedisUserKind(u["kind"]), u["subject"], u["password"]) for name, u in raw.items()}


def save_users(data_dir: Path, users: dict[str, StoredUser]) -> None:
    write_private(users_path(data_dir), json.dumps({name: asdict(u) for name, u in sorted(users.items())}, indent=2))


def ensure_system_users(data_dir: Path) -> dict[str, StoredUser]:
    """The stored users, with a password made for every system user that has none yet."""
    users = load_users(data_dir)
    for user in system_users():
        if user.name not in users:
            subject = user.name.split(".", 1)[-1]
            users[user.name] = StoredUser(user.kind, subject, secrets.token_urlsafe(24))
    save_users(data_dir, users)
    return users


def acl_file_text(admin_password: str, users: dict[str, StoredUser]) -> str:
    lines = [admin_file_line(admin_password)]
    lines += [stored.user().acl_file_line(stored.password) for _, stored in sorted(users.items())]
    return "\n".join(lines) + "\n"


def write_acl_file(path: Path, admin_password: str, users: dict[str, StoredUser]) -> None:
    write_private(path, acl_file_text(admin_password, users))


def enroll(admin_url: str, data_dir: Path, user: RedisUser) -> str:
    """Create (or re-key) `user` on the running embedded server and in the data dir; return its URL.

    A user enrolled again gets a new password (the old one stops working at once). The server
    saves its ACL file, so a restarted server keeps the user."""
    password = secrets.token_urlsafe(24)
    with redis.Redis.from_url(admin_url) as admin:
        admin.execute_command("ACL", "SETUSER", *user.setuser_args(password))
        admin.execute_command("ACL", "SAVE")
    record_user(data_dir, user, password)
    return _with_user(admin_url, user.name, password)


def record_user(data_dir: Path, user: RedisUser, password: str) -> None:
    """Keep `user`'s password in the data dir's users file (the server's ACL file has its hash)."""
    users = load_users(data_dir)
    users[user.name] = StoredUser(user.kind, user.name.split(".", 1)[-1], password)
    save_users(data_dir, users)


def forget_user(data_dir: Path, name: str) -> bool:
    """Drop user `name` from the data dir's users file, so the ACL file written at the next start no
    longer has it (an unenrolled agent); False when the file did not hold it."""
    users = load_users(data_dir)
    if users.pop(name, None) is None:
        return False
    save_users(data_dir, users)
    return True


def user_url(users_file: Path | str | None, admin_url: str, name: str) -> str:
    """The URL process `name` connects with: its own user when the embedded Redis has one (`users_file`
    is `Endpoints.redis_users_file`), else `admin_url` (an external Redis, whose users the operator
    made: docs/running.md#security)."""
    stored = load_users(Path(users_file).parent).get(name) if users_file else None
    return _with_user(admin_url, name, stored.password) if stored else admin_url
