"""Start/stop cycles of embedded servers in their own data dirs: no orphans, crash clean-up, one owner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from shared.embedded import (
    Backends,
    EmbeddedServerError,
    Endpoints,
    InstanceAlreadyRunning,
    probe_backends,
)
from shared.embedded.health import run_sync
from shared.embedded.processes import process_matches, spawn, wait_until_ready
from shared.embedded.state import Layout, OwnerLock, clean_leftovers
from shared.settings import Settings

REPO = Path(__file__).resolve().parents[2]
OWNER_SCRIPT = """
import sys
from shared.embedded import Backends
from shared.settings import Settings
Backends(Settings(), sys.argv[1], durable=False, die_with_owner=sys.argv[2] == "1").start()
print("READY", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def no_backend_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("CARDFLOW_")]:
        monkeypatch.delenv(key)


@pytest.fixture
def data_dir(data_dir_factory: Callable[[], Path]) -> Iterator[Path]:
    path = data_dir_factory()
    yield path
    if (path / "run" / "state.json").exists():  # a failed test left a killed owner's servers behind
        lock = OwnerLock.acquire(Layout.of(path))
        clean_leftovers(Layout.of(path))
        lock.release()


def server_processes(data_dir: Path) -> list[tuple[int, float]]:
    """(pid, create_time) of every recorded server and all its descendants (postgres workers...)."""
    state = json.loads((data_dir / "run" / "state.json").read_text())
    found = []
    for server in state["servers"]:
        leader = psutil.Process(server["pid"])
        found += [(p.pid, p.create_time()) for p in [leader, *leader.children(recursive=True)]]
    return found


def processes_naming(data_dir: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions `data_dir`."""
    mentioned = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(data_dir) in " ".join(proc.info["cmdline"] or ()):
            mentioned.append(proc)
    return mentioned


def described(pid: int) -> str:
    """A process for an assertion message: pid, name, status, process group, parent and command line."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return (f"{pid} {proc.name()} {proc.status()} pgid={os.getpgid(pid)} ppid={proc.ppid()}"
                    f" {' '.join(proc.cmdline())[:200]}")  # fmt: skip
    except (psutil.Error, ProcessLookupError) as gone:
        return f"{pid} (gone while described: {type(gone).__name__})"


def wait_for(condition, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def start_owner_and_kill_it(data_dir: Path, die_with_owner: bool) -> list[tuple[int, float]]:
    """Start backends in a child Python process, SIGKILL it once ready; return the servers it started."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, str(data_dir), "1" if die_with_owner else "0"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        lines = (line.strip() for line in iter(owner.stdout.readline, ""))
        assert "READY" in lines  # log lines come first; EOF means the owner failed
        servers = server_processes(data_dir)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    return servers


@pytest.mark.usefixtures("no_backend_env")
def test_stop_leaves_no_process_and_no_run_files(data_dir: Path) -> None:
    backends = Backends(Settings(), data_dir, durable=False)
    endpoints = backends.start()
    servers = server_processes(data_dir)
    health = run_sync(lambda: probe_backends(endpoints))
    embedded = backends.embedded

    backends.stop()

    assert all(h.ok for h in health), health
    assert sorted(embedded) == ["postgres", "redis", "s3"]
    assert len(servers) > 3  # three leaders plus postgres' own workers
    assert [pid for pid, created in servers if process_matches(pid, created)] == []
    assert processes_naming(data_dir) == []
    assert sorted(p.name for p in (data_dir / "run").iterdir()) == ["owner.lock"]


@pytest.mark.usefixtures("no_backend_env")
def test_next_start_stops_the_servers_of_a_killed_owner(data_dir: Path) -> None:
    leftovers = start_owner_and_kill_it(data_dir, die_with_owner=False)
    leaders = json.loads((data_dir / "run" / "state.json").read_text())["servers"]
    # the crash left the servers running (their short-lived workers may come and go by themselves)
    assert all(psutil.pid_exists(server["pid"]) for server in leaders)

    backends = Backends(Settings(), data_dir, durable=False)
    with backends as endpoints:
        health = run_sync(lambda: probe_backends(endpoints))
        still_alive = [described(pid) for pid, created in leftovers if process_matches(pid, created)]

    stopped = f"the start stopped {backends.leftovers_stopped}"  # says what happened if an assertion fails
    assert still_alive == [], stopped
    assert all(h.ok for h in health), health
    assert [described(p.pid) for p in processes_naming(data_dir)] == [], stopped


@pytest.mark.usefixtures("no_backend_env")
def test_servers_exit_by_themselves_when_their_owner_is_killed(data_dir: Path) -> None:
    servers = start_owner_and_kill_it(data_dir, die_with_owner=True)

    assert wait_for(lambda: not any(process_matches(pid, created) for pid, created in servers))
    assert processes_naming(data_dir) == []


def test_a_second_owner_of_a_running_data_dir_is_refused(backends: Endpoints) -> None:
    assert backends.data_dir is not None
    with pytest.raises(InstanceAlreadyRunning, match="already runs"):
        Backends(Settings(), backends.data_dir).start()


def test_only_unconfigured_backends_are_started(backends: Endpoints, data_dir: Path) -> None:
    configured = Settings(redis_url=backends.redis_url, database_url=backends.database_url)

    own = Backends(configured, data_dir, durable=False)
    with own as endpoints:
        started = own.embedded
        health = run_sync(lambda: probe_backends(endpoints))

    assert started == ["s3"]
    assert (endpoints.redis_url, endpoints.database_url) == (backends.redis_url, backends.database_url)
    assert endpoints.s3_endpoint != backends.s3_endpoint
    assert all(h.ok for h in health), health


def test_a_server_that_dies_at_start_up_is_reported_with_its_log(tmp_path: Path) -> None:
    process = spawn(
        "bogus",
        [sys.executable, "-c", "print('cannot bind: address in use'); raise SystemExit(3)"],
        tmp_path / "bogus.log",
        ports={},
    )

    with pytest.raises(EmbeddedServerError, match="(?s)bogus exited during start-up.*address in use"):
        wait_until_ready(process, lambda: "connection refused", timeout=30)
