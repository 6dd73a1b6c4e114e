"""`cardflow up --demo` (what `make run` runs): the demo settles, summarises, and stops without orphans."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def processes_of(data_dir: Path) -> list[psutil.Process]:
    """Live processes started for this instance (their environment names its data dir)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("CARDFLOW_DATA_DIR") == str(data_dir) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def wait_for_text(path: Path, pattern: str, up: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if re.search(pattern, text):
            return text
        assert up.poll() is None, f"cardflow up exited early:\n{text[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"no {pattern!r} within {timeout:.0f}s:\n{path.read_text(errors='replace')[-3000:]}")


def test_up_demo_settles_with_a_summary_and_stops_cleanly(data_dir_factory: Callable[[], Path]) -> None:
    data_dir = data_dir_factory()
    output = data_dir / "up.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDFLOW_")} | {"COLUMNS": "200"}
    with open(output, "wb") as sink:
        up = subprocess.Popen([sys.executable, "-m", "services.cli.main", "up", "--demo", "--data-dir", str(data_dir)],
                              cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        text = wait_for_text(output, r"demo settled after \d+s", up, timeout=240)
        children = processes_of(data_dir)
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=90)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()

    assert up.returncode == 0
    total = re.search(r"total\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)\s*│", text)
    assert total is not None, text[-3000:]
    # every demo task but the impossible one succeeded (the llm jobs, sent without project or profile,
    # only through their templates)
    assert total.groups() == ("27", "26", "1")
    assert re.search(r"giant-moe\s+unmatchable: needs 200 GB", text)
    assert "the submission was rejected" in text and "did you mean 'gpus'" in text
    assert "uploaded s3://cardflow-demo/features/2024-06/_READY" in text
    assert {f"{name}.log" for name in ("intake", "dispatcher", "views", "agent-l40s-a")} <= {p.name for p in (data_dir / "logs").iterdir()}
    assert len(children) >= 10  # six services, the console, three agents (and the embedded servers)
    assert processes_of(data_dir) == []
    assert "Stopped." in output.read_text(errors="replace")
    # Not a terminal: plain progress lines, no cursor movement; Ctrl-C / SIGTERM reports no restart.
    assert re.search(r"^\s*\d+s  tasks: .*GPUs leased", text, re.MULTILINE)
    assert "\x1b[" not in text and "\r" not in text
    assert "restarting in" not in output.read_text(errors="replace")
