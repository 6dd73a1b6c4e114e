"""Supervise the system's child processes: services, the console and simulated agents.

    with Supervisor(log_dir, env=endpoints.as_env()) as supervisor:
        supervisor.start([ChildSpec("intake", cardflow_argv("service", "intake")), ...])
        ...                      # children run; a crashed one is restarted after a back-off
    # leaving the block stops them all: SIGTERM to every process group, wait, SIGKILL the rest

- Each child runs in its own session, so its pid is its process-group id and stopping it also
  stops anything it started; a terminal's Ctrl-C reaches only the owner, which stops them in order.
- Output (stdout + stderr) is appended to `<log_dir>/<name>.log`.
- Environment: this process's, plus `env` (the endpoints' `CARDFLOW_*`), plus the child's own.
- A child that exits while supervised is restarted after a back-off (1 s, 2 s, 4 s ... up to
  `max_backoff_s`; back to 1 s once it has stayed up `stable_after_s`). Starts, exits and restarts
  are recorded as `Notice`s, which the live view shows.
- Every spawn happens on the supervisor's own thread, which outlives its children: on Linux each
  child gets a parent-death signal (tied to the spawning thread), so even a SIGKILLed owner
  leaves no orphan behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from services.cli.lang import CliLang
from shared.embedded.processes import group_members, next_backoff, open_log

_PR_SET_PDEATHSIG = 1
KILL_WAIT_S = 5.0
"""How long `close` waits for SIGKILLed processes to be gone (the kernel needs a moment)."""


@dataclass(frozen=True)
class ChildSpec:
    """One supervised process: a unique name (also its log file's), its argv and extra environment."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    restart: bool = True


class NoticeKind(StrEnum):
    """What the supervisor did or saw happen to a child."""

    STARTED = "started"
    RESTARTED = "restarted"
    EXITED = "exited"  # and is not restarted (`ChildSpec.restart` False)
    EXITED_RESTARTING = "exited_restarting"  # a restart follows after the back-off
    STOPPED = "stopped"  # by the supervisor (`stop_child`, leaving the block)


NOTICE_WORDS: dict[CliLang, dict[NoticeKind, str]] = {
    CliLang.EN: {
        NoticeKind.STARTED: "started (pid {pid}, log {log})",
        NoticeKind.RESTARTED: "restarted (pid {pid}, log {log})",
        NoticeKind.EXITED: "exited with code {code} after {uptime_s:.1f}s (not restarted)",
        NoticeKind.EXITED_RESTARTING: "exited with code {code} after {uptime_s:.1f}s; restarting in {restart_in_s:.0f}s",
        NoticeKind.STOPPED: "stopped (exit code {code})",
    },
    CliLang.ZH: {
        NoticeKind.STARTED: "已启动（pid {pid}，日志 {log}）",
        NoticeKind.RESTARTED: "已重启（pid {pid}，日志 {log}）",
        NoticeKind.EXITED: "运行 {uptime_s:.1f} 秒后退出，退出码 {code}（不再重启）",
        NoticeKind.EXITED_RESTARTING: "运行 {uptime_s:.1f} 秒后退出，退出码 {code}；{restart_in_s:.0f} 秒后重启",
        NoticeKind.STOPPED: "已停止（退出码 {code}）",
    },
}
"""A notice's sentence per language; its placeholders are the notice's `facts`."""


@dataclass(frozen=True)
class Notice:
    """Something the supervisor did or saw, for the live view and the logs."""

    at: float  # time.time()
    child: str
    kind: NoticeKind
    facts: Mapping[str, object] = field(default_factory=dict)  # pid, log, code, uptime_s, restart_in_s

    @property
    def is_exit(self) -> bool:
        return self.kind in (NoticeKind.EXITED, NoticeKind.EXITED_RESTARTING)

    def text(self, lang: CliLang = CliLang.EN) -> str:
        return NOTICE_WORDS[lang][self.kind].format(**self.facts)

    @property
    def message(self) -> str:
        """The English sentence (logs, tests)."""
        return self.text(CliLang.EN)


@dataclass(frozen=True)
class ChildStatus:
    """How one child is doing right now."""

    name: str
    pid: int | None
    running: bool
    restarts: int
    restart_in_s: float | None  # seconds until the next restart, while waiting for it
    last_exit: int | None


@dataclass
class _Child:
    spec: ChildSpec
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = 0.0
    restart_at: float | None = None
    last_exit: int | None = None


class Supervisor:
    """Starts, restarts and stops child processes (see the module docstring)."""

    def __init__(
        self,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        *,
        initial_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        stable_after_s: float = 30.0,
        stop_timeout_s: float = 10.0,
        poll_s: float = 0.2,
        on_notice: Callable[[Notice], None] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.env = {**os.environ, **(env or {})}
        self.initial_backoff_s, self.max_backoff_s, self.stable_after_s = initial_backoff_s, max_backoff_s, stable_after_s
        self.stop_timeout_s, self.poll_s = stop_timeout_s, poll_s
        self.notices: deque[Notice] = deque(maxlen=200)
        self._on_notice = on_notice
        self._children: dict[str, _Child] = {}
        self._lock = threading.Lock()
        self._requests: queue.Queue[Callable[[], None]] = queue.Queue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Supervisor:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="cardflow-supervisor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every child (SIGTERM to each group, wait, SIGKILL what is left), then the thread."""
        if self._thread is None:
            return
        self._call(self._stop_all)
        self._stopping.set()
        self._thread.join()
        self._thread = None

    # ---- commands (run on the supervisor's thread) -----------------------------------------

    def start(self, specs: Iterable[ChildSpec]) -> list[int]:
        """Start these children now; returns their pids. Names must be new."""
        specs = list(specs)
        duplicate = [s.name for s in specs if s.name in self._children]
        if duplicate or len({s.name for s in specs}) != len(specs):
            raise ValueError(f"child names must be unique; already used: {duplicate or [s.name for s in specs]}")
        return self._call(lambda: [self._spawn(_Child(spec)) for spec in specs])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a child's process group (it is restarted like any crashed child)."""
        child = self._children[name]
        if child.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.popen.pid, sig)

    def stop_child(self, name: str) -> None:
        """Stop one child for good (no restart)."""
        self._call(lambda: self._stop([self._children.pop(name)]))

    def status(self) -> list[ChildStatus]:
        now = time.monotonic()
        with self._lock:
            return [
                ChildStatus(
                    name=c.spec.name,
                    pid=c.popen.pid if c.popen else None,
                    running=c.popen is not None and c.popen.poll() is None,
                    restarts=c.restarts,
                    restart_in_s=max(0.0, c.restart_at - now) if c.restart_at is not None else None,
                    last_exit=c.last_exit,
                )
                for c in self._children.values()
            ]

    def pid_of(self, name: str) -> int | None:
        child = self._children.get(name)
        return child.popen.pid if child and child.popen and child.popen.poll() is None else None

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    # ---- the supervisor's thread -------------------------------------------------------------

    def _call(self, request: Callable[[], object]) -> object:
        """Run `request` on the supervisor's thread and return its result (or raise its error)."""
        if self._thread is None:
            raise RuntimeError("the supervisor is not running (use it as a context manager)")
        done = threading.Event()
        outcome: dict[str, object] = {}

        def wrapped() -> None:
            try:
                outcome["value"] = request()
            except BaseException as exc:  # handed back to the caller
                outcome["error"] = exc
            finally:
                done.set()

        self._requests.put(wrapped)
        done.wait()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome.get("value")

    def _run(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(queue.Empty):
                self._requests.get(timeout=self.poll_s)()
            while not self._requests.empty():
                self._requests.get_nowait()()
            if not self._stopping.is_set():
                self._reap_and_restart()

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        for child in list(self._children.values()):
            if child.restart_at is not None and now >= child.restart_at:
                child.restart_at = None
                child.restarts += 1
                self._spawn(child)
            elif child.popen is not None and child.restart_at is None and child.popen.poll() is not None:
                self._exited(child, now)

    def _exited(self, child: _Child, now: float) -> None:
        code = child.popen.returncode if child.popen else None
        uptime = now - child.started_at
        child.last_exit = code
        if not child.spec.restart:
            self._notice(child.spec.name, NoticeKind.EXITED, code=code, uptime_s=uptime)
            child.popen = None
            return
        child.backoff_s = next_backoff(
            child.backoff_s, uptime,
            initial_s=self.initial_backoff_s, max_s=self.max_backoff_s, stable_after_s=self.stable_after_s,
        )  # fmt: skip
        child.restart_at = now + child.backoff_s
        self._notice(child.spec.name, NoticeKind.EXITED_RESTARTING, code=code, uptime_s=uptime, restart_in_s=child.backoff_s)

    def _spawn(self, child: _Child) -> int:
        spec = child.spec
        with open_log(self.log_path(spec.name)) as log:
            popen = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env, **spec.env},
                start_new_session=True,
                preexec_fn=_die_with_spawning_thread(),
            )
        with self._lock:
            child.popen, child.started_at = popen, time.monotonic()
            self._children[spec.name] = child
        kind = NoticeKind.RESTARTED if child.restarts else NoticeKind.STARTED
        self._notice(spec.name, kind, pid=popen.pid, log=str(self.log_path(spec.name)))
        return popen.pid

    def _stop_all(self) -> None:
        self._stopping.set()  # from now on an exit is a stop: no "exited ... restarting" notice, no restart
        self._stop(list(self._children.values()))

    def _stop(self, children: list[_Child]) -> None:
        """SIGTERM every group at once, wait up to `stop_timeout_s` in total, SIGKILL the rest."""
        groups = [c.popen.pid for c in children if c.popen is not None]
        for child in children:
            child.restart_at = None
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for child in children:
            if child.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        for pgid in groups:
            _kill_group(pgid, deadline)
        for child in children:
            if child.popen is not None:
                child.popen.wait()
                child.last_exit = child.popen.returncode
                self._notice(child.spec.name, NoticeKind.STOPPED, code=child.popen.returncode)

    def _notice(self, child: str, kind: NoticeKind, **facts: object) -> None:
        notice = Notice(time.time(), child, kind, facts)
        self.notices.append(notice)
        if self._on_notice is not None:
            self._on_notice(notice)


def _kill_group(pgid: int, deadline: float) -> None:
    """SIGKILL what is left of a process group (children the leader did not stop in time)."""
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_members(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        killed_by = time.monotonic() + KILL_WAIT_S
        while group_members(pgid) and time.monotonic() < killed_by:  # SIGKILL takes effect asynchronously
            time.sleep(0.02)


def _die_with_spawning_thread() -> Callable[[], None] | None:
    """A preexec hook: Linux sends the child SIGTERM when the spawning thread (ours) dies."""
    if not sys.platform.startswith("linux"):
        return None
    parent_pid = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return hook
