"""`cardflow agent …` as a real child process for a test: start it, stop it with SIGTERM, and make sure
it never outlives the test (killed if it did not end), with its stderr kept for the failure message."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator

from shared.settings import Settings


class AgentProcess:
    """A started `cardflow agent` process."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    async def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM, then its exit code (waiting at most `timeout_s`)."""
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.process.wait, timeout_s)

    def stderr(self) -> str:
        return self.process.stderr.read().decode() if self.process.stderr else ""


@contextlib.asynccontextmanager
async def agent_process(settings: Settings, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[AgentProcess]:
    """Run `cardflow agent ARGS` against `settings`' Redis and data directory; killed on exit if still running."""
    environment = {**os.environ, "CARDFLOW_REDIS_URL": settings.redis_url, "CARDFLOW_DATA_DIR": str(settings.data_dir), **(env or {})}
    command = [sys.executable, "-m", "services.cli.main", "agent", *args]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield AgentProcess(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
