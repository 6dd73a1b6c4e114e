"""docker-compose.yml's Redis keeps the users `cardflow apply-logins` saved across a restart.

Runs the compose file's own start script of the `redis` container with the packaged Valkey server
(the Redis 7 protocol and ACL file format) in place of `redis-server`: users made with
`ACL SETUSER` + `ACL SAVE` log in after a restart, and the admin's password is the one of the
environment at each start (a changed .env value takes over, the old one stops working).
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml

from shared.embedded.processes import free_ports
from shared.embedded.redis_server import redis_server_binary
from shared.redis_acl import service_user

REPO = Path(__file__).resolve().parents[2]
REDIS = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["redis"]


@contextmanager
def compose_redis(data: Path, admin_password: str) -> Iterator[int]:
    """The compose `redis` container's command, run here: its script, then Valkey with the compose arguments."""
    _, _, script, argv0, server, *args = REDIS["command"]
    assert server == "redis-server"
    (port,) = free_ports(1)
    argv = [redis_server_binary(), *args, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
    env = {"PATH": "/usr/bin:/bin", "REDIS_PASSWORD": admin_password, "REDIS_ACL_FILE": str(data / "users.acl")}
    process = subprocess.Popen(["sh", "-c", script.replace("$$", "$"), argv0, *argv], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with redis.Redis(port=port, password=admin_password) as admin:
                    admin.ping()
                break
            except redis.ConnectionError:
                assert process.poll() is None and time.monotonic() < deadline, "the compose Redis did not start"
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_users_saved_by_setup_outlive_a_restart_and_the_admin_follows_the_environment(tmp_path: Path) -> None:
    user, password = service_user("intake"), secrets.token_urlsafe(16)
    first_admin, second_admin = secrets.token_urlsafe(16), secrets.token_urlsafe(16)

    with compose_redis(tmp_path, first_admin) as port, redis.Redis(port=port, password=first_admin) as admin:
        admin.execute_command("ACL", "SETUSER", *user.setuser_args(password))
        admin.execute_command("ACL", "SAVE")

    with compose_redis(tmp_path, second_admin) as port:
        with redis.Redis(port=port, username=user.name, password=password) as intake:
            assert intake.ping()
            with pytest.raises(redis.exceptions.NoPermissionError):
                intake.xadd("cf:events", {"forged": "1"})  # its rules came back with it
        with redis.Redis(port=port, password=first_admin) as old_admin, pytest.raises(redis.AuthenticationError):
            old_admin.ping()
        with redis.Redis(port=port, password=second_admin) as admin:
            assert admin.execute_command("ACL", "WHOAMI") in (b"default", "default")
