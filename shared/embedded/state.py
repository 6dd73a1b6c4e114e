"""The data directory of an embedded instance: its layout, owner lock, `run/state.json`, and crash clean-up.

Layout of `<data_dir>`:
    credentials.json        generated secrets (0600)
    redis/ postgres/ s3/    server data
    logs/<server>.log       server stdout/stderr
    run/owner.lock          flock held by the live owner process (released by the kernel on death)
    run/state.json          owner pid + every started server's pid, ports and log
    run/endpoints.env       `export CARDFLOW_...` lines of the live instance (0600)
    run/api.env             its console's URL and admin token file, once the console runs (0600)
    admin.token             the local admin's API token (0600; kept across restarts while valid)

The owner lock, not the pid file, decides whether an instance is alive: a lock that can be taken
means every `state.json` found is a leftover of a crashed run, whose servers are then stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from shared.embedded.processes import ServerRecord, process_matches, stop_group

# Server executables we start, with the signal that shuts each down quickly and cleanly.
ORPHAN_STOP_SIGNALS = {"postgres": signal.SIGINT, "weed": signal.SIGTERM, "valkey-server": signal.SIGTERM}


class InstanceAlreadyRunning(RuntimeError):
    """Another live process owns this data directory."""


@dataclass(frozen=True)
class Layout:
    root: Path

    @classmethod
    def of(cls, data_dir: Path | str) -> Layout:
        return cls(Path(data_dir).expanduser().resolve())

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "owner.lock"

    @property
    def endpoints_file(self) -> Path:
        return self.run_dir / "endpoints.env"

    @property
    def api_file(self) -> Path:
        return self.run_dir / "api.env"

    def server_dir(self, name: str) -> Path:
        return self.root / name

    def log_file(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def ensure(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)


class OwnerLock:
    """An exclusive, non-blocking flock on `run/owner.lock`; the kernel drops it when the owner dies."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle: IO[str] | None = handle

    @classmethod
    def acquire(cls, layout: Layout) -> OwnerLock:
        layout.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(layout.lock_file, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            owner = read_state(layout).get("owner_pid", "unknown")
            raise InstanceAlreadyRunning(
                f"a cardflow instance (pid {owner}) already runs on data dir {layout.root}"
            ) from None
        return cls(handle)

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def is_instance_running(layout: Layout) -> bool:
    """True if some live process holds the owner lock of `layout`."""
    if not layout.lock_file.exists():
        return False
    try:
        OwnerLock.acquire(layout).release()
    except InstanceAlreadyRunning:
        return True
    return False


def read_state(layout: Layout) -> dict[str, Any]:
    try:
        return json.loads(layout.state_file.read_text())
    except (OSError, ValueError):
        return {}


def write_state(layout: Layout, records: list[ServerRecord], embedded: list[str]) -> None:
    """Record the owner and its servers (atomically: write a temp file, then rename)."""
    me = psutil.Process()
    state = {
        "owner_pid": me.pid,
        "owner_create_time": me.create_time(),
        "data_dir": str(layout.root),
        "updated_at": time.time(),
        "embedded": embedded,
        "servers": [record.to_json() for record in records],
    }
    tmp = layout.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(layout.state_file)


def clear_state(layout: Layout) -> None:
    for path in (layout.state_file, layout.endpoints_file, layout.api_file):
        path.unlink(missing_ok=True)


def clean_leftovers(layout: Layout) -> list[str]:
    """Stop servers of a crashed run and drop its stale files. Call only while holding the owner lock.

    Returns a description of each process that was stopped.
    """
    stopped = []
    for record in (ServerRecord.from_json(r) for r in read_state(layout).get("servers", [])):
        if process_matches(record.pid, record.create_time):
            stop_group(record.pid, record.create_time, record.stop_signal, record.stop_timeout)
            stopped.append(f"{record.name} (pid {record.pid})")
        remove_weed_sockets(record.ports.values())
    stopped += _stop_orphans_referencing(layout.root)
    clear_state(layout)
    return stopped


def _stop_orphans_referencing(root: Path) -> list[str]:
    """Servers whose command line names this data dir but that no state file recorded (crash mid-start)."""
    stopped = []
    for proc in psutil.process_iter(["name", "cmdline", "create_time"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        stop_signal = ORPHAN_STOP_SIGNALS.get(proc.info["name"])
        if stop_signal is not None and str(root) + os.sep in cmdline + os.sep:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(proc.pid) == proc.pid:  # a group leader: one of ours, not a postgres child
                    stop_group(proc.pid, proc.info["create_time"], stop_signal, timeout=5.0)
                    stopped.append(f"{proc.info['name']} (pid {proc.pid})")
    return stopped


def remove_weed_sockets(ports: Any) -> None:
    """SeaweedFS leaves `/tmp/seaweedfs-<kind>-<port>.sock` files behind; remove ours."""
    for port in ports:
        for sock in Path("/tmp").glob(f"seaweedfs-*-{int(port)}.sock"):
            with contextlib.suppress(OSError):
                sock.unlink()
