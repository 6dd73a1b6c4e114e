"""The seam between the daemon and what actually runs tasks: `Runner` (sim or subprocess) and `RunSink`.

The daemon asks a runner to start and stop runs; a runner tells its sink what it observes
(progress, checkpoints, the exit). Runners own no lease state: the daemon feeds every observation
through `AgentState`, which decides what to report.
"""

from __future__ import annotations

from typing import Protocol

from shared.events.reports import GpuUtilisation, LeaseGrantOrder

from services.agent.state import Stop


class RunSink(Protocol):
    """Where a runner reports what its runs do (the daemon)."""

    def progress(self, lease_id: str, progress: float | None, output_units: float | None, message: str = "") -> None:
        ...

    def checkpointed(self, lease_id: str, checkpoint_uri: str, progress: float | None, checksum: str | None = None) -> None:
        ...

    def exited(self, lease_id: str, exit_code: int | None, output_units: float | None, error: str | None) -> None:
        """Exactly once per started run, after which the runner forgets it."""
        ...


class Runner(Protocol):
    """Runs granted tasks on this node's GPUs."""

    def start(self, order: LeaseGrantOrder) -> None:
        """Start the run in the background; problems are reported through `RunSink.exited`."""
        ...

    def stop(self, stop: Stop) -> None:
        """Stop a run (checkpoint first if asked, within `stop.grace_s`); it then reports its exit."""
        ...

    def utilisation(self) -> tuple[GpuUtilisation, ...]:
        """Per-GPU utilisation of every GPU of the node, now."""
        ...

    def progress_now(self) -> dict[str, float]:
        """Lease id -> the progress of its run right now, where known (heartbeats carry it)."""
        ...

    def running(self) -> int:
        """How many runs have not reported their exit yet."""
        ...

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until every run has exited (True) or `timeout` passed (False)."""
        ...
