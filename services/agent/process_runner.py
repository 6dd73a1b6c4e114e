"""Real runs: the task's command as a subprocess on the lease's GPUs.

Per run: a checkpoint directory per task (`<checkpoint_root>/<task_id>`, kept across leases so a
resumed run finds its files), a log file with the process's stdout and stderr, and the environment

    CUDA_VISIBLE_DEVICES     the lease's GPU indices, e.g. "0,1"
    CARDFLOW_TASK_ID         the task id
    CARDFLOW_LEASE_ID        the lease id
    CARDFLOW_CHECKPOINT_DIR  where to write checkpoints (created)
    CARDFLOW_STATUS_FILE     the status file the agent reads (see `status_file`)
    CARDFLOW_RESUME_FROM     the checkpoint to resume from (only set when resuming)

plus the task's own `env`. The agent's own `CARDFLOW_*` settings (backend URLs, secrets) are
never passed on. The process runs in its own session; a stop sends SIGTERM to its process group
and SIGKILL after the grace period. Exit code 0 = succeeded; a signal death reports no exit code.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from shared.events.reports import GpuUtilisation, LeaseGrantOrder
from shared.logging import get_logger

from services.agent.hardware import NodeHardware
from services.agent.runner import RunSink
from services.agent.state import Stop
from services.agent.status_file import STATUS_FILE_NAME, TaskStatus, new_checkpoint, progress_changed, read_status

log = get_logger(__name__)

GpuMeter = Callable[[int], tuple[float, float | None]]
"""GPU index -> (utilisation %, memory used GB), e.g. from NVML."""

ERROR_TAIL_CHARS = 1500


@dataclass
class _ProcessRun:
    order: LeaseGrantOrder
    checkpoint_dir: Path
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    meter: psutil.Process | None = None
    status: TaskStatus | None = None  # the last status reported
    kill_at: float | None = None  # loop time at which SIGKILL follows the SIGTERM
    task: asyncio.Task[None] | None = None

    @property
    def status_path(self) -> Path:
        return self.checkpoint_dir / STATUS_FILE_NAME


class ProcessRunner:
    """Runs granted leases as subprocesses (see the module docstring)."""

    def __init__(
        self,
        hardware: NodeHardware,
        sink: RunSink,
        checkpoint_root: Path,
        log_dir: Path,
        *,
        grace_s: float | None = None,
        poll_s: float = 0.5,
        meter: GpuMeter | None = None,
    ) -> None:
        self._hardware = hardware
        self._sink = sink
        self._checkpoint_root = checkpoint_root
        self._log_dir = log_dir
        self._grace_s = grace_s
        self._poll_s = poll_s
        self._meter = meter
        self._runs: dict[str, _ProcessRun] = {}

    def start(self, order: LeaseGrantOrder) -> None:
        run = _ProcessRun(
            order,
            self._checkpoint_root / order.task_id,
            self._log_dir / f"{order.task_id}.{order.lease_id}.log",
        )
        self._runs[order.lease_id] = run
        run.task = asyncio.create_task(self._run(run), name=f"process:{order.lease_id}")

    def stop(self, stop: Stop) -> None:
        """SIGTERM now (the task checkpoints and exits), SIGKILL after the grace period."""
        run = self._runs.get(stop.lease_id)
        if run is None or run.kill_at is not None:
            return
        grace = self._grace_s if self._grace_s is not None else stop.grace_s
        run.kill_at = asyncio.get_running_loop().time() + grace
        if run.process is not None:
            _signal_group(run.process.pid, signal.SIGTERM)

    def running(self) -> int:
        return len(self._runs)

    def progress_now(self) -> dict[str, float]:
        return {
            lease_id: run.status.progress
            for lease_id, run in self._runs.items()
            if run.status is not None and run.status.progress is not None
        }

    async def wait_idle(self, timeout: float) -> bool:
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return not self._runs

    def utilisation(self) -> tuple[GpuUtilisation, ...]:
        busy = {index: run for run in self._runs.values() for index in run.order.gpu_indices}
        return tuple(self._gpu_util(gpu.index, busy.get(gpu.index)) for gpu in self._hardware.gpus)

    def _gpu_util(self, index: int, run: _ProcessRun | None) -> GpuUtilisation:
        if self._meter is not None:
            util, memory = self._meter(index)
            return GpuUtilisation(index=index, util_pct=min(100.0, util), memory_used_gb=memory)
        if run is None:
            return GpuUtilisation(index=index, util_pct=0.0)
        if run.status is not None and run.status.util_pct is not None:
            return GpuUtilisation(index=index, util_pct=run.status.util_pct)
        return GpuUtilisation(index=index, util_pct=_cpu_percent(run.meter))  # fake GPUs: CPU as a proxy

    async def _run(self, run: _ProcessRun) -> None:
        lease_id = run.order.lease_id
        try:
            if run.order.command is None:
                self._sink.exited(lease_id, None, None, "the grant has no command to run")
                return
            run.process = await self._spawn(run)
            exit_code = await self._supervise(run, run.process)
            self._observe_status(run)
            output = run.status.output_units if run.status else None
            self._sink.exited(lease_id, exit_code, output, _failure_text(exit_code, run.process, run.log_path))
        except Exception as exc:  # the run must end its lease even when the agent cannot start it
            log.exception("run failed in the agent", lease_id=lease_id)
            self._sink.exited(lease_id, None, None, f"agent could not run the task: {exc!r}")
        finally:
            self._runs.pop(lease_id, None)

    async def _spawn(self, run: _ProcessRun) -> asyncio.subprocess.Process:
        order = run.order
        run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        run.status_path.unlink(missing_ok=True)  # a previous lease's status is not this run's
        run.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = task_environment(order, run.checkpoint_dir, run.status_path)
        with run.log_path.open("ab") as log_file:
            options = {"stdout": log_file, "stderr": asyncio.subprocess.STDOUT, "env": env, "start_new_session": True}
            if isinstance(order.command, str):
                process = await asyncio.create_subprocess_shell(order.command, **options)
            else:
                process = await asyncio.create_subprocess_exec(*order.command, **options)
        if run.kill_at is not None:  # stopped while spawning
            _signal_group(process.pid, signal.SIGTERM)
        run.meter = _process_meter(process.pid)
        log.info("task started", lease_id=order.lease_id, task_id=order.task_id, pid=process.pid, log=str(run.log_path))
        return process

    async def _supervise(self, run: _ProcessRun, process: asyncio.subprocess.Process) -> int | None:
        """Wait for the exit, reading the status file and enforcing the grace period meanwhile."""
        loop = asyncio.get_running_loop()
        exited = asyncio.ensure_future(process.wait())
        while not exited.done():
            timeout = self._poll_s if run.kill_at is None else max(0.05, min(self._poll_s, run.kill_at - loop.time()))
            await asyncio.wait({exited}, timeout=timeout)
            if exited.done():
                break
            self._observe_status(run)
            if run.kill_at is not None and loop.time() >= run.kill_at:
                log.warning("grace period over; killing the task", lease_id=run.order.lease_id)
                _signal_group(process.pid, signal.SIGKILL)
        _signal_group(process.pid, signal.SIGKILL)  # leftovers of the group (a shell's children)
        code = exited.result()
        return code if code >= 0 else None

    def _observe_status(self, run: _ProcessRun) -> None:
        current = read_status(run.status_path)
        lease_id = run.order.lease_id
        checkpoint = new_checkpoint(run.status, current)
        if current is not None and checkpoint is not None:
            self._sink.checkpointed(lease_id, checkpoint, current.progress, current.checksum)
        if current is not None and progress_changed(run.status, current):
            self._sink.progress(lease_id, current.progress, current.output_units, current.message)
        if current is not None:
            run.status = current


def task_environment(order: LeaseGrantOrder, checkpoint_dir: Path, status_path: Path) -> dict[str, str]:
    """The subprocess environment: the agent's (minus its CARDFLOW_* settings), the task's, cardflow's."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env.update(order.env)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in order.gpu_indices),
            "CARDFLOW_TASK_ID": order.task_id,
            "CARDFLOW_LEASE_ID": order.lease_id,
            "CARDFLOW_CHECKPOINT_DIR": str(checkpoint_dir),
            "CARDFLOW_STATUS_FILE": str(status_path),
        }
    )
    if order.resume_from:
        env["CARDFLOW_RESUME_FROM"] = order.resume_from
    return env


def _failure_text(exit_code: int | None, process: asyncio.subprocess.Process, log_path: Path) -> str | None:
    if exit_code == 0:
        return None
    how = f"exit code {exit_code}" if exit_code is not None else f"killed by {_signal_name(process.returncode)}"
    tail = _tail(log_path)
    return f"{how}; last output:\n{tail}" if tail else how


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - ERROR_TAIL_CHARS))
            return file.read().decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


def _signal_name(returncode: int | None) -> str:
    try:
        return signal.Signals(-(returncode or 0)).name
    except ValueError:
        return f"signal {-(returncode or 0)}"


def _signal_group(pid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pid, signum)  # the process leads its own session, so its pid is the group id
    except (ProcessLookupError, PermissionError):
        pass


def _process_meter(pid: int) -> psutil.Process | None:
    try:
        meter = psutil.Process(pid)
        meter.cpu_percent(None)  # the first call only sets the baseline
        return meter
    except psutil.Error:
        return None


def _cpu_percent(meter: psutil.Process | None) -> float:
    if meter is None:
        return 0.0
    try:
        return round(min(100.0, meter.cpu_percent(None)), 1)
    except psutil.Error:
        return 0.0
