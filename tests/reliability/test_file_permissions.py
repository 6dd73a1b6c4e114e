"""Least privilege on disk (issue 15: logs and the AOF were world-readable): files holding
secrets are 0600, logs 0640 at most, and the embedded servers' data files are not readable by
others."""

from __future__ import annotations

import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis import Redis

from services.demo.supervisor import ChildSpec, Supervisor
from shared.embedded import Backends
from shared.settings import Settings


@pytest.fixture(scope="module")
def instance(data_dir_factory: Callable[[], Path]) -> Iterator[Backends]:
    backends = Backends(Settings(), data_dir_factory(), durable=False, supervise=False)
    backends.start()
    yield backends
    backends.stop()


def others_can_read(path: Path) -> bool:
    return bool(path.stat().st_mode & (stat.S_IROTH | stat.S_IWOTH))


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


def test_secrets_logs_and_the_aof_are_not_readable_by_others(instance: Backends) -> None:
    assert instance.endpoints is not None
    client = Redis.from_url(instance.endpoints.redis_url)
    client.set("written", "so the AOF holds data")
    client.close()
    root = instance.layout.root
    secrets = [root / "credentials.json", instance.layout.endpoints_file, instance.layout.server_dir("redis") / "redis.conf"]
    for path in secrets:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, mode(path))
    logs = sorted((root / "logs").glob("*.log"))
    assert {p.stem for p in logs} >= {"redis", "postgres", "s3"}
    for path in logs:
        assert stat.S_IMODE(path.stat().st_mode) & 0o037 == 0, (path, mode(path))  # 0640 at most
    redis_files = [p for p in instance.layout.server_dir("redis").rglob("*") if p.is_file()]
    assert any("appendonly" in p.name for p in redis_files), redis_files
    for path in redis_files:
        assert not others_can_read(path), (path, mode(path))


def test_supervised_service_logs_are_0640_at_most(tmp_path: Path) -> None:
    with Supervisor(tmp_path / "logs") as supervisor:
        supervisor.start([ChildSpec("echo", ["sh", "-c", "echo secret-ish"], restart=False)])
        time.sleep(0.5)
    log = tmp_path / "logs" / "echo.log"
    assert stat.S_IMODE(log.stat().st_mode) & 0o037 == 0, mode(log)
