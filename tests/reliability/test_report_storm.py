"""A misbehaving agent floods checkpoints (issue 15: `checkpoint.interval_minutes: 1e-300` made
simulated agents send 100,000 checkpoint reports per lease; the dispatcher fell minutes behind and
unrelated tasks waited). Intake now refuses such intervals, so the storm here comes from a
deliberately misbehaving agent: the test writes thousands of valid checkpoint reports (right agent,
lease and fencing token) onto `cf:reports` as fast as Redis takes them, while an honest agent of
another time scale runs an unrelated task. The whole system runs in-process on the session's
servers (nothing is killed)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from shared.delivery.wire import wire_fields
from shared.events import Envelope, TaskState, make_event
from shared.events.reports import TaskCheckpointed as CheckpointReport
from shared.events.subjects import agent_subject
from shared.names import REPORTS_STREAM
from shared.settings import Settings
from tests.helpers.system import RunningSystem, running_system

STORM = 3_000
GAP_S, BURST = 30.0, 3  # the policy's defaults: `reports.min_checkpoint_gap_s`, `reports.burst`
LONG_TASK = {"name": "stormy", "project": "llm", "priority_class": "core", "gpus": 8, "min_vram_gb": 80,
             "estimate_gpu_hours": 400, "profile": "compute", "checkpoint": {"interval_minutes": 60}}  # fmt: skip
HONEST_TASK = {"name": "honest", "project": "eval", "priority_class": "core", "gpus": 1, "min_vram_gb": 80,
               "estimate_gpu_hours": 2, "profile": "compute", "checkpoint": {"interval_minutes": 10}}  # fmt: skip


@pytest.fixture
async def system(fresh_settings: Settings, data_dir_factory: Callable[[], Path]) -> AsyncIterator[RunningSystem]:
    async with running_system(fresh_settings, data_dir_factory()) as running:
        yield running


def checkpoint_report(lease: Any, seq: int) -> Envelope:
    return make_event(
        CheckpointReport, subject=agent_subject(lease.agent_id), subject_seq=1_000_000 + seq,
        producer=f"agent/{lease.agent_id}", actor=f"agent:{lease.agent_id}",
        data={"agent_id": lease.agent_id, "lease_id": lease.lease_id, "task_id": lease.task_id,
              "fencing_token": lease.fencing_token, "checkpoint_uri": f"s3://storm/{seq}", "progress": 0.01},
    )  # fmt: skip


async def test_a_checkpoint_storm_is_refused_cheaply_counted_and_does_not_stall_an_honest_task(
    system: RunningSystem,
) -> None:
    system.start_agent("stormy-a", "H100x8", time_scale=1)  # real time: its task runs for days
    await system.submit([LONG_TASK])
    [started] = await system.wait_for(lambda s: s.of_type("task.started"), what="the long task to start")
    [lease] = [e.data for e in system.of_type("lease.granted") if e.data.lease_id == started.data.lease_id]
    system.start_agent("honest-b", "H100x8", time_scale=600)

    began = time.monotonic()
    reports = [checkpoint_report(lease, i) for i in range(STORM)]
    async with system.redis.pipeline(transaction=False) as pipe:
        for report in reports:
            pipe.xadd(REPORTS_STREAM, wire_fields(report))
        await pipe.execute()
    await system.submit([HONEST_TASK])

    honest = await system.wait_for(lambda s: (v := s.task_by_name("honest")) and v.is_terminal and v, timeout=180,
                                   what="the honest task to end")  # fmt: skip
    storm_ids = {r.event_id for r in reports}

    def accepted() -> list[Envelope]:
        return [e for e in system.of_type("task.checkpointed") if e.causation_id in storm_ids]

    consumed: list[int] = []

    async def all_handled(s: RunningSystem) -> bool:
        consumed.append(await s.pool.fetchval(
            "SELECT count(*) FROM dispatcher.inbox WHERE consumer = 'dispatcher:reports' AND event_id = ANY($1::text[])",
            list(storm_ids)))
        return consumed[-1] == STORM

    try:
        await system.wait_for(all_handled, timeout=300, what="every storm report to be handled")
    finally:  # shown when the test fails
        print("storm reports the dispatcher consumed, last seen:", consumed[-1:])
    elapsed = time.monotonic() - began
    rows = await system.pool.fetch("SELECT reason, count FROM dispatcher.rejected_reports WHERE lease_id = $1",
                                   lease.lease_id)

    assert honest.state is TaskState.SUCCEEDED
    assert len(accepted()) <= 1 + BURST + math.ceil(elapsed / GAP_S), "the cap let more checkpoints through than its gap allows"
    assert {r["reason"] for r in rows} == {"rate_limited"}
    refused = sum(r["count"] for r in rows)
    assert len(accepted()) + refused <= STORM and refused > 0  # the rest were coalesced (superseded in a batch)
    assert len(rows) * 10 <= refused, f"{len(rows)} rejected_reports rows for {refused} refused reports: not counted"
    storm_view = system.views[lease.task_id]
    assert storm_view.state is TaskState.RUNNING and storm_view.lease_id == lease.lease_id
    scales = dict(await system.pool.fetch("SELECT agent_id, time_scale FROM dispatcher.nodes"))
    assert scales == {"stormy-a": 1.0, "honest-b": 600.0}
