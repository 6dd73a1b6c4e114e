"""Simulated runs: each lease "runs" as an asyncio task that passes its plan's milestones in real time.

The arithmetic lives in `sim_plan` (pure); this module only sleeps between milestones and tells
the sink. A stop (preempt/revoke/shutdown) interrupts the sleep at once: the run computes the
progress reached, checkpoints there if asked, and exits (a simulated process needs no grace).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from shared.event_wait import wait_until_set
from shared.events.reports import GpuUtilisation, LeaseGrantOrder
from shared.logging import get_logger

from services.agent.hardware import NodeHardware
from services.agent.runner import RunSink
from services.agent.sim_plan import Milestone, SimRunPlan, checkpoint_uri, plan_sim_run, simulated_util
from services.agent.state import Stop

log = get_logger(__name__)

BUSY_MEMORY_SHARE = (0.55, 0.9)


@dataclass
class _SimRun:
    order: LeaseGrantOrder
    plan: SimRunPlan
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    stop: Stop | None = None
    task: asyncio.Task[None] | None = None
    progress: float = 0.0  # at the start of the current segment (between two milestones)
    segment_began: float = 0.0  # loop time the segment began
    segment_end: float = 0.0  # progress of the milestone the segment ends at


class SimRunner:
    """Runs granted leases as simulated tasks at `time_scale` x real speed."""

    def __init__(
        self,
        hardware: NodeHardware,
        sink: RunSink,
        time_scale: float,
        *,
        progress_step: float | None = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        self._hardware = hardware
        self._sink = sink
        self._time_scale = time_scale
        self._progress_step = progress_step
        self._rng = rng or random.Random()
        self._runs: dict[str, _SimRun] = {}

    def start(self, order: LeaseGrantOrder) -> None:
        plan = plan_sim_run(order, self._time_scale, progress_step=self._progress_step)
        run = _SimRun(order, plan)
        run.progress = run.segment_end = plan.start_progress
        run.segment_began = asyncio.get_running_loop().time()
        self._runs[order.lease_id] = run
        run.task = asyncio.create_task(self._run(run), name=f"sim:{order.lease_id}")

    def stop(self, stop: Stop) -> None:
        run = self._runs.get(stop.lease_id)
        if run is not None:
            run.stop = stop
            run.stop_requested.set()

    def running(self) -> int:
        return len(self._runs)

    def progress_now(self) -> dict[str, float]:
        now = asyncio.get_running_loop().time()
        return {
            lease_id: min(run.segment_end, run.plan.progress_after(run.progress, now - run.segment_began))
            for lease_id, run in self._runs.items()
        }

    async def wait_idle(self, timeout: float) -> bool:
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return not self._runs

    def utilisation(self) -> tuple[GpuUtilisation, ...]:
        busy = {index: run for run in self._runs.values() for index in run.order.gpu_indices}
        return tuple(self._gpu_util(gpu.index, gpu.vram_gb, busy.get(gpu.index)) for gpu in self._hardware.gpus)

    def _gpu_util(self, index: int, vram_gb: float, run: _SimRun | None) -> GpuUtilisation:
        if run is None:
            return GpuUtilisation(index=index, util_pct=0.0, memory_used_gb=0.0)
        util = simulated_util(run.order.env, run.order.labels)
        memory = round(vram_gb * self._rng.uniform(*BUSY_MEMORY_SHARE), 2)
        return GpuUtilisation(index=index, util_pct=round(util, 1), memory_used_gb=memory)

    async def _run(self, run: _SimRun) -> None:
        lease_id = run.order.lease_id
        try:
            await self._pass_milestones(run)
        except Exception as exc:  # a bug here must still end the lease, not leave it running forever
            log.exception("simulated run failed", lease_id=lease_id)
            self._sink.exited(lease_id, None, None, f"agent simulation error: {exc!r}")
        finally:
            self._runs.pop(lease_id, None)

    async def _pass_milestones(self, run: _SimRun) -> None:
        plan, lease_id, task_id = run.plan, run.order.lease_id, run.order.task_id
        loop = asyncio.get_running_loop()
        progress = plan.start_progress
        for target, milestone in plan.milestones():
            began = loop.time()
            run.progress, run.segment_began, run.segment_end = progress, began, target
            if await _stopped_within(run.stop_requested, plan.seconds_between(progress, target)):
                self._stop_at(run, plan.progress_after(progress, loop.time() - began))
                return
            progress = target
            if milestone is Milestone.CHECKPOINT:
                self._sink.checkpointed(lease_id, checkpoint_uri(task_id, progress), progress)
            elif milestone is Milestone.PROGRESS:
                self._sink.progress(lease_id, progress, plan.output_units(progress))
            elif milestone is Milestone.FAIL:
                error = f"simulated failure at progress {progress:.2f}"
                self._sink.exited(lease_id, plan.exit_code, plan.output_units(progress), error)
                return
            else:
                self._sink.exited(lease_id, 0, plan.output_units(1.0), None)
                return

    def _stop_at(self, run: _SimRun, progress: float) -> None:
        stop, lease_id = run.stop, run.order.lease_id
        if stop is not None and stop.checkpoint_first:
            self._sink.checkpointed(lease_id, checkpoint_uri(run.order.task_id, progress), progress)
        self._sink.exited(lease_id, None, run.plan.output_units(progress), f"stopped at progress {progress:.4f}")


async def _stopped_within(stop_requested: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds` unless a stop is requested first (True then)."""
    return await wait_until_set(stop_requested, seconds)
