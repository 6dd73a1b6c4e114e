"""Backend outages: an embedded Redis, PostgreSQL or S3 killed under its owner is reaped and
restarted on the same address (issue 15: Redis stayed a zombie child of `cardflow up`, and a
hand-restarted PostgreSQL failed on the stale `postmaster.pid` of the unreaped postmaster)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Callable

import psutil
import pytest

from shared.embedded import Backends, Endpoints
from shared.embedded.health import probe_postgres, probe_redis, probe_s3, run_sync

RECOVERY_TIMEOUT_S = 120.0


def answers(name: str, endpoints: Endpoints) -> bool:
    probes = {
        "redis": lambda: probe_redis(endpoints.redis_url),
        "postgres": lambda: probe_postgres(endpoints.database_url),
        "s3": lambda: probe_s3(endpoints),
    }
    return run_sync(probes[name]).error is None


def wait_for(condition: Callable[[], bool], timeout: float = RECOVERY_TIMEOUT_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def is_zombie_or_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("name", ["redis", "postgres", "s3"])
def test_a_killed_embedded_server_is_reaped_and_restarted_on_the_same_address(own_backends: Backends, name: str) -> None:
    endpoints = own_backends.endpoints
    assert endpoints is not None and answers(name, endpoints)
    [before] = [p for p in own_backends.processes if p.name == name]
    os.kill(before.record.pid, signal.SIGKILL)

    assert wait_for(lambda: answers(name, endpoints)), f"{name} did not come back:\n{before.log_tail()}"
    [after] = [p for p in own_backends.processes if p.name == name]
    assert after.record.pid != before.record.pid and after.record.ports == before.record.ports
    assert wait_for(lambda: not psutil.pid_exists(before.record.pid)), "the killed server was never reaped"
    assert own_backends.watch is not None and own_backends.watch.restarts()[name] >= 1


def test_a_stale_postmaster_pid_of_a_zombie_does_not_block_a_start(own_backends: Backends) -> None:
    """The unreaped postmaster's pid file named a zombie whose name was still `postgres`."""
    from shared.embedded.postgres_server import remove_stale_pid_file

    pgdata = own_backends.layout.server_dir("postgres")
    stale = pgdata.parent / "stale-pgdata"
    stale.mkdir(exist_ok=True)
    impostor = stale / "postgres"  # a process whose name is `postgres`, as the dead postmaster's was
    shutil.copy(shutil.which("sleep") or "/bin/sleep", impostor)
    zombie = psutil.Popen([str(impostor), "0"])
    asyncio.run(asyncio.sleep(0.5))  # exited, not reaped: a zombie
    assert is_zombie_or_gone(zombie.pid) and zombie.name() == "postgres"
    (stale / "postmaster.pid").write_text(f"{zombie.pid}\n{stale}\n")
    remove_stale_pid_file(stale)
    assert not (stale / "postmaster.pid").exists()
    live = (pgdata / "postmaster.pid").read_text().splitlines()[0]
    remove_stale_pid_file(pgdata)
    assert (pgdata / "postmaster.pid").exists(), f"the live postmaster's ({live}) pid file is kept"
    zombie.wait()
