"""The console served by uvicorn in a subprocess (`cardflow console`), as users reach it.

    with served_console(settings, data_dir) as base_url:
        httpx.post(f"{base_url}/v1/tasks", json=...)

In-process ASGI transports hide what a real server does with connections (keep-alive, limits,
backlog, a request body sent in pieces), so the HTTP reliability tests use this.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from shared.embedded.processes import free_ports
from shared.settings import Settings
from tests.helpers.system import settings_env

START_TIMEOUT_S = 120.0


@contextlib.contextmanager
def served_console(settings: Settings, data_dir: Path, **env: str) -> Iterator[str]:
    """Run `cardflow console` on a free port until the block ends; yields its base URL."""
    (port,) = free_ports(1)
    log_path = data_dir / "console.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "console", "--port", str(port)],
            env={**os.environ, **settings_env(settings, data_dir), **env}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base_url, process, log_path)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_healthy(base_url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"cardflow console exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"cardflow console did not answer within {START_TIMEOUT_S:.0f}s:\n{log_path.read_text()[-3000:]}")
