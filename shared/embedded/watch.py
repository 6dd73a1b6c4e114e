"""`ServerWatch`: restart an embedded server that died, on its own ports, with back-off.

`Backends` runs one watch thread over the servers it started (`cardflow up` and the test
fixtures alike). Every `poll_s` it reaps each server process (`Popen.poll`, so a killed server
never lingers as a zombie of its owner); one that has exited is restarted after a back-off
(0.5 s, 1 s, 2 s ... up to `max_backoff_s`; back to the start once it stayed up
`stable_after_s`), on the same ports with the same arguments, so every client's URL stays
valid. Before a restart, what is left of the old process group is killed (PostgreSQL backends
of a killed postmaster hold its shared memory) and the server's stale lock files are removed
(`before_restart`: PostgreSQL's `postmaster.pid`, SeaweedFS's sockets). Each restart is logged
and counted in `restarts`.

The watch thread spawns the new servers and outlives them (it stops before `Backends` stops the
servers), so they get the parent-death signal like the first ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.embedded.processes import ManagedProcess, next_backoff, respawn
from shared.logging import get_logger

log = get_logger(__name__)


@dataclass
class WatchedServer:
    """One server under watch: its current process, what to clean before a restart, its history."""

    process: ManagedProcess
    before_restart: Callable[[], None] | None = None
    started_at: float = field(default_factory=time.monotonic)
    backoff_s: float = 0.0
    restart_at: float | None = None
    restarts: int = 0


class ServerWatch:
    """Reap and restart embedded servers (see the module docstring)."""

    def __init__(
        self,
        on_respawn: Callable[[ManagedProcess, ManagedProcess], None],
        *,
        die_with_owner: bool = True,
        poll_s: float = 0.25,
        initial_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        stable_after_s: float = 30.0,
    ) -> None:
        self._on_respawn = on_respawn
        self._die_with_owner = die_with_owner
        self.poll_s, self.initial_backoff_s = poll_s, initial_backoff_s
        self.max_backoff_s, self.stable_after_s = max_backoff_s, stable_after_s
        self.servers: dict[str, WatchedServer] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, process: ManagedProcess, before_restart: Callable[[], None] | None = None) -> None:
        with self._lock:
            self.servers[process.name] = WatchedServer(process, before_restart)

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="cardflow-server-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (no more restarts); the servers themselves are left to their owner."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        with self._lock:
            self.servers.clear()

    def restarts(self) -> dict[str, int]:
        with self._lock:
            return {name: server.restarts for name, server in self.servers.items()}

    def _run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            with self._lock:
                for server in self.servers.values():
                    self._check(server, time.monotonic())

    def _check(self, server: WatchedServer, now: float) -> None:
        if server.restart_at is None:
            if server.process.is_alive():  # polls the Popen: a dead server is reaped here
                return
            server.backoff_s = next_backoff(
                server.backoff_s, now - server.started_at,
                initial_s=self.initial_backoff_s, max_s=self.max_backoff_s, stable_after_s=self.stable_after_s,
            )  # fmt: skip
            server.restart_at = now + server.backoff_s
            log.error("embedded server exited; restarting", server=server.process.name,
                      exit_code=_exit_code(server.process), restart_in_s=server.backoff_s)  # fmt: skip
        elif now >= server.restart_at and not self._stopping.is_set():
            self._restart(server, now)

    def _restart(self, server: WatchedServer, now: float) -> None:
        old = server.process
        try:
            if server.before_restart is not None:
                server.before_restart()
            server.process = respawn(old.record, die_with_owner=self._die_with_owner)
        except Exception as exc:  # try again after the next back-off
            log.error("embedded server restart failed", server=old.name, error=repr(exc))
            server.started_at, server.restart_at = now, None
            return
        server.restarts += 1
        server.started_at, server.restart_at = now, None
        self._on_respawn(old, server.process)
        log.warning("embedded server restarted", server=old.name, pid=server.process.record.pid, restarts=server.restarts)


def _exit_code(process: ManagedProcess) -> int | None:
    return process.popen.returncode if process.popen is not None else None
