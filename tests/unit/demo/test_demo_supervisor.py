"""The supervisor with real child processes: logs, restart with back-off, no orphans on stop."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from services.demo.supervisor import ChildSpec, Supervisor, next_backoff


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(
    ("previous", "uptime", "expected"),
    [
        (0.0, 0.1, 1.0),  # first crash: the initial delay
        (1.0, 0.1, 2.0),  # crashed again quickly: doubles
        (16.0, 0.1, 30.0),  # capped
        (30.0, 0.1, 30.0),
        (16.0, 45.0, 1.0),  # it had stayed up long enough: back to the initial delay
    ],
)
def test_backoff_doubles_up_to_the_cap_and_resets_after_a_stable_run(previous: float, uptime: float, expected: float) -> None:
    assert next_backoff(previous, uptime, initial_s=1.0, max_s=30.0, stable_after_s=30.0) == expected


def test_a_child_gets_the_environment_and_logs_to_its_file(tmp_path: Path) -> None:
    spec = ChildSpec("echo", python("import os; print('value=' + os.environ['CF_TEST'] + os.environ['CF_OWN'])"),
                     env={"CF_OWN": "-own"}, restart=False)  # fmt: skip
    with Supervisor(tmp_path, env={"CF_TEST": "from-endpoints"}) as supervisor:
        supervisor.start([spec])
        wait_for(lambda: not supervisor.status()[0].running, what="the child to exit")

    assert "value=from-endpoints-own" in (tmp_path / "echo.log").read_text()


def test_a_crashed_child_is_restarted_after_a_backoff_and_the_restart_is_noticed(tmp_path: Path) -> None:
    marker = tmp_path / "runs"
    code = f"open({str(marker)!r}, 'a').write('x'); import time; time.sleep(0.2); raise SystemExit(3)"
    with Supervisor(tmp_path, initial_backoff_s=0.3) as supervisor:
        supervisor.start([ChildSpec("flaky", python(code))])
        wait_for(lambda: marker.exists() and len(marker.read_text()) >= 3, what="two restarted runs")
        messages = [n.message for n in supervisor.notices if n.child == "flaky"]

    assert supervisor.status()[0].restarts >= 2
    assert any("exited with code 3" in m and "restarting in" in m for m in messages)
    assert any(m.startswith("restarted") for m in messages)


def test_stop_leaves_no_process_of_any_group_behind(tmp_path: Path) -> None:
    # a child that ignores SIGTERM and starts a grandchild in its group: SIGKILL after the timeout
    stubborn = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)")  # fmt: skip
    polite = "import time; time.sleep(60)"
    with Supervisor(tmp_path, stop_timeout_s=1.0) as supervisor:
        supervisor.start([ChildSpec("stubborn", python(stubborn)), ChildSpec("polite", python(polite))])
        wait_for(lambda: len(psutil.Process(supervisor.pid_of("stubborn")).children()) == 1, what="the grandchild")
        groups = [supervisor.pid_of("stubborn"), supervisor.pid_of("polite")]

    survivors = [p for p in psutil.process_iter() if _pgid(p.pid) in groups and p.status() != psutil.STATUS_ZOMBIE]
    assert survivors == []


def test_killing_a_child_by_signal_restarts_it(tmp_path: Path) -> None:
    with Supervisor(tmp_path, initial_backoff_s=0.1) as supervisor:
        supervisor.start([ChildSpec("agent", python("import time; time.sleep(60)"))])
        first = supervisor.pid_of("agent")
        supervisor.kill("agent", signal.SIGKILL)
        wait_for(lambda: supervisor.pid_of("agent") not in (None, first), what="a new pid")

        assert supervisor.status()[0].restarts == 1
        assert supervisor.status()[0].last_exit == -signal.SIGKILL


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    with Supervisor(tmp_path) as supervisor:
        supervisor.start([ChildSpec("a", python("import time; time.sleep(60)"))])
        with pytest.raises(ValueError, match="unique"):
            supervisor.start([ChildSpec("a", python("pass"))])


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_stopping_the_supervisor_reports_stops_not_restarts(tmp_path: Path) -> None:
    """Ctrl-C of `cardflow up`: each child is reported stopped, none 'exited … restarting'."""
    sleeper = python("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(60)")
    with Supervisor(tmp_path) as supervisor:
        supervisor.start([ChildSpec(f"service-{n}", sleeper) for n in range(4)])
        wait_for(lambda: all(child.running for child in supervisor.status()), what="every child running")

    messages = [notice.message for notice in supervisor.notices]
    assert [m for m in messages if "restarting" in m or m.startswith("exited")] == []
    assert len([m for m in messages if m.startswith("stopped")]) == 4
