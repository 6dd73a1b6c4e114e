"""Child server processes: spawn in their own process group, log to a file, stop without orphans.

Every embedded server runs in a new session (so its pid is also its process-group id and a
terminal Ctrl-C reaches only the owner, which then stops the servers in order). Stopping sends the
server's own graceful signal to the whole group, waits, then SIGKILLs whatever is left of the group.
On Linux the server also gets a parent-death signal, so even a SIGKILLed owner leaves nothing behind
(only set when spawned from the main thread: the kernel fires it when the spawning *thread* exits).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

_PR_SET_PDEATHSIG = 1


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be started, or did not answer in time."""


@dataclass(frozen=True)
class ServerRecord:
    """What `state.json` remembers of one running server, enough to find and stop it later."""

    name: str
    pid: int
    create_time: float
    ports: dict[str, int]
    log_path: str
    stop_signal: int = int(signal.SIGTERM)
    stop_timeout: float = 10.0  # seconds between the graceful signal and SIGKILL
    cmdline: list[str] = field(default_factory=list)
    user: str | None = None  # the OS user it runs as (PostgreSQL when we are root)
    cwd: str | None = None
    death_signal: int | None = None  # sent when the owner dies (None: stop_signal)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerRecord:
        return cls(**data)


def free_ports(count: int, host: str = "127.0.0.1", avoid: set[int] | None = None) -> list[int]:
    """`count` distinct TCP ports that are free right now (the OS picks them; small race accepted)."""
    taken = set(avoid or ())
    ports: list[int] = []
    holders: list[socket.socket] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            holders.append(sock)
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            if port not in taken:
                taken.add(port)
                ports.append(port)
    finally:
        for sock in holders:
            sock.close()
    return ports


LOG_MODE = 0o640
SERVER_UMASK = 0o077
"""Files an embedded server creates (Redis's AOF, SeaweedFS's volumes) are its owner's alone."""


def open_log(path: Path) -> IO[bytes]:
    """`path` opened for appending, created 0640 (owner writes, group reads, others nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, LOG_MODE)
    os.chmod(path, LOG_MODE)  # an older, looser file too
    return os.fdopen(fd, "ab")


def _private_files_hook(then: Callable[[], None] | None) -> Callable[[], None]:
    """A preexec hook: the child creates its files 0600 / dirs 0700, then runs `then`."""

    def hook() -> None:
        os.umask(SERVER_UMASK)
        if then is not None:
            then()

    return hook


def _death_signal_hook(stop_signal: int, *, thread_outlives_child: bool = False) -> Callable[[], None] | None:
    """A preexec hook asking Linux to send `stop_signal` to the child when its parent dies.

    The kernel fires it when the spawning THREAD exits, so only the main thread — or a thread
    that outlives the child (`thread_outlives_child`, e.g. the watcher that restarts servers and
    stops them before it ends) — may set it."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread() and not thread_outlives_child:
        return None
    parent_pid = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, stop_signal, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent already died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


@dataclass
class ManagedProcess:
    """A server process this owner started (or found in a leftover state file)."""

    record: ServerRecord
    popen: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.record.name

    def is_alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return process_matches(self.record.pid, self.record.create_time)

    def log_tail(self, lines: int = 30) -> str:
        return tail(Path(self.record.log_path), lines)

    def stop(self) -> None:
        stop_group(self.record.pid, self.record.create_time, self.record.stop_signal, self.record.stop_timeout)
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=1)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    ports: dict[str, int],
    stop_signal: int = int(signal.SIGTERM),
    stop_timeout: float = 10.0,
    death_signal: int | None = None,
    user: str | None = None,
    cwd: Path | None = None,
    die_with_owner: bool = True,
    thread_outlives_child: bool = False,
) -> ManagedProcess:
    """Start `argv` in its own session, stdout+stderr appended to `log_path`.

    With `die_with_owner`, the server receives `death_signal` (default: `stop_signal`) when this
    process dies without stopping it.
    """
    hook = _death_signal_hook(death_signal or stop_signal, thread_outlives_child=thread_outlives_child)
    with open_log(log_path) as log:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            user=user,
            group=_primary_group(user),
            extra_groups=[] if user else None,
            preexec_fn=_private_files_hook(hook if die_with_owner else None),
        )
    record = ServerRecord(
        name=name,
        pid=popen.pid,
        create_time=psutil.Process(popen.pid).create_time(),
        ports=dict(ports),
        log_path=str(log_path),
        stop_signal=int(stop_signal),
        stop_timeout=stop_timeout,
        cmdline=list(argv),
        user=user,
        cwd=str(cwd) if cwd is not None else None,
        death_signal=death_signal,
    )
    return ManagedProcess(record=record, popen=popen)


def respawn(record: ServerRecord, *, die_with_owner: bool = True, thread_outlives_child: bool = True) -> ManagedProcess:
    """Start the server `record` describes again, as it was: same argv, ports, log, user and cwd.

    What is left of the old process group (e.g. PostgreSQL backends of a killed postmaster, which
    would keep its shared memory busy) is killed first."""
    _kill_group(record.pid)
    return spawn(
        record.name, record.cmdline, Path(record.log_path), ports=record.ports, stop_signal=record.stop_signal,
        stop_timeout=record.stop_timeout, death_signal=record.death_signal, user=record.user,
        cwd=Path(record.cwd) if record.cwd else None, die_with_owner=die_with_owner,
        thread_outlives_child=thread_outlives_child,
    )  # fmt: skip


def next_backoff(previous_s: float, uptime_s: float, *, initial_s: float, max_s: float, stable_after_s: float) -> float:
    """The delay before restarting a child that exited after `uptime_s` (pure; doubles up to `max_s`)."""
    if previous_s <= 0 or uptime_s >= stable_after_s:
        return initial_s
    return min(previous_s * 2, max_s)


def _primary_group(user: str | None) -> int | None:
    if user is None:
        return None
    import pwd

    return pwd.getpwnam(user).pw_gid


def process_matches(pid: int, create_time: float) -> bool:
    """True if `pid` is alive and is the very process recorded (not a recycled pid)."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of the process group `pgid`."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
    return members


def stop_group(pid: int, create_time: float, stop_signal: int, timeout: float) -> None:
    """Stop the server `pid` and its whole process group: graceful signal, wait, then SIGKILL."""
    if not process_matches(pid, create_time):
        _kill_group(pid)  # the leader is gone; its group may still hold children
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, stop_signal)
    _wait_gone(pid, timeout)
    _kill_group(pid)


def _wait_gone(pgid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.1)


def _kill_group(pgid: int) -> None:
    if not group_members(pgid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    _wait_gone(pgid, 5.0)


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until_ready(
    process: ManagedProcess, is_ready: Callable[[], str | None], timeout: float
) -> None:
    """Poll `is_ready` (None = ready, else the last error) until it passes, the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    error: str | None = "not probed yet"
    while time.monotonic() < deadline:
        if not process.is_alive():
            raise _startup_error(process, "exited during start-up", error)
        error = is_ready()
        if error is None:
            return
        time.sleep(0.2)
    raise _startup_error(process, f"did not answer within {timeout:.0f}s", error)


def _startup_error(process: ManagedProcess, what: str, error: str | None) -> EmbeddedServerError:
    return EmbeddedServerError(
        f"embedded {process.name} {what} (last probe error: {error}).\n"
        f"--- tail of {process.record.log_path} ---\n{process.log_tail()}"
    )
