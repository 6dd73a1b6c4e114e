"""Runs that finish while the dispatcher cannot hear them are not run again (issue 15, item 4).

Observed: after a Redis outage, runs that had finished during it were refused as `lease_ended`,
ran a second time and were charged the whole lease; `bench/chaos.py` found the same after a
PostgreSQL outage (the new leader's first sweep expired a lease whose clean `report.finished` was
still pending in `cf:reports`). Both tests run the whole system on servers of their own (the
session's are shared by every test: never kill those), with durable Redis (AOF), as `cardflow up`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.delivery.wire import wire_fields
from shared.embedded import Backends, Endpoints
from shared.embedded.health import probe_redis
from shared.events import Envelope, TaskState, make_event, parse_report
from shared.events.reports import TaskFinished
from shared.events.subjects import agent_subject
from shared.names import REPORTS_STREAM
from shared.settings import Settings
from tests.helpers.system import RunningSystem, running_system
from tests.integration.conftest import fresh_database_settings

TIME_SCALE = 600
SHORT_TASK = {"name": "short-eval", "project": "eval", "priority_class": "core", "gpus": 1, "min_vram_gb": 80,
              "estimate_gpu_hours": 2, "profile": "compute"}  # about 12 s at x600 on one H100  # fmt: skip
LONG_TASK = {"name": "long-finetune", "project": "llm", "priority_class": "core", "gpus": 8, "min_vram_gb": 80,
             "estimate_gpu_hours": 34, "profile": "compute", "checkpoint": {"interval_minutes": 10}}  # fmt: skip
OUTAGE_S = 30.0  # Redis stays down this long: ten lease TTLs of the test timings (3 s), and longer than
# the short run, which must finish inside the outage even when the test sees its start late (busy machine)


@pytest.fixture(scope="module")
def own_backends(data_dir_factory: Callable[[], Path]) -> Iterator[Backends]:
    backends = Backends(Settings(), data_dir_factory(), durable=True)  # AOF, as `cardflow up`
    backends.start()
    yield backends
    backends.stop()


@pytest.fixture
async def system(own_backends: Backends, data_dir_factory: Callable[[], Path]) -> AsyncIterator[RunningSystem]:
    assert own_backends.endpoints is not None
    async with fresh_database_settings(own_backends.endpoints) as settings, \
            running_system(settings, data_dir_factory()) as running:  # fmt: skip
        yield running


def of_task(system: RunningSystem, event_type: str, task_id: str) -> list[Envelope]:
    return [e for e in system.of_type(event_type) if e.data.task_id == task_id]


async def finish_reports(system: RunningSystem, lease_id: str) -> list[Envelope]:
    entries = await system.redis.xrange(REPORTS_STREAM)
    reports = [parse_report(fields[b"event"]) for _, fields in entries]
    return [r for r in reports if r.type == "report.finished" and r.data.lease_id == lease_id]


async def redis_answers(endpoints: Endpoints, timeout_s: float) -> float:
    """Wait until the restarted Redis answers; returns when (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (await probe_redis(endpoints.redis_url)).ok:
            return time.monotonic()
        await asyncio.sleep(0.2)
    raise AssertionError(f"Redis did not come back within {timeout_s:.0f} s")


async def test_a_run_that_finishes_while_redis_is_down_is_neither_expired_nor_run_again(
    own_backends: Backends, system: RunningSystem
) -> None:
    assert own_backends.watch is not None and own_backends.endpoints is not None
    system.start_agent("h100-a", "H100x8", time_scale=TIME_SCALE)
    await system.submit([SHORT_TASK])
    started = await system.wait_for(lambda s: s.of_type("task.started"), what="the task to start")
    task_id, lease_id = started[0].data.task_id, started[0].data.lease_id

    own_backends.watch.initial_backoff_s = own_backends.watch.max_backoff_s = OUTAGE_S
    [redis] = [p for p in own_backends.processes if p.name == "redis"]
    os.kill(redis.record.pid, signal.SIGKILL)
    killed_at = time.time()
    await redis_answers(own_backends.endpoints, OUTAGE_S + 90)
    back_at = time.time()
    own_backends.watch.initial_backoff_s, own_backends.watch.max_backoff_s = 0.5, 30.0
    await system.redis.connection_pool.disconnect()  # the test's own connections died with the server

    await system.wait_for(lambda s: s.views.get(task_id) and s.views[task_id].is_terminal, timeout=90,
                          what="the task to end")  # fmt: skip
    [finish] = await finish_reports(system, lease_id)
    assert killed_at < finish.occurred_at.timestamp() < back_at, (
        f"the run did not finish during the outage: killed {killed_at:.1f}, finished "
        f"{finish.occurred_at.timestamp():.1f}, back {back_at:.1f} (a busy machine saw the start too late?)"
    )
    assert system.views[task_id].state is TaskState.SUCCEEDED
    assert of_task(system, "task.requeued", task_id) == [] and of_task(system, "lease.expired", task_id) == []
    assert [e.data.lease_id for e in of_task(system, "lease.granted", task_id)] == [lease_id]
    [released] = [e for e in system.of_type("lease.released") if e.data.lease_id == lease_id]
    assert released.data.reason == "succeeded"
    assert released.data.ended_at == finish.occurred_at, "charged beyond the run's end"
    rejected = await system.pool.fetch("SELECT reason FROM dispatcher.rejected_reports WHERE lease_id = $1", lease_id)
    assert rejected == []


async def test_a_clean_finish_reported_after_its_lease_expired_ends_the_task_instead_of_a_rerun(
    system: RunningSystem,
) -> None:
    # An outage the dispatcher cannot know of (between one agent and Redis): the agent falls
    # silent (SIGSTOP), its lease expires, the task is requeued; then the run's clean finish
    # arrives with the lease's own fencing token.
    system.start_agent("h100-a", "H100x8", time_scale=TIME_SCALE)
    await system.submit([LONG_TASK])
    [started] = await system.wait_for(lambda s: s.of_type("task.started"), what="the task to start")
    task_id, lease_id = started.data.task_id, started.data.lease_id
    [lease] = [e.data for e in system.of_type("lease.granted") if e.data.lease_id == lease_id]
    system.kill_agent("h100-a", signal.SIGSTOP)
    await system.wait_for(lambda s: of_task(s, "task.requeued", task_id), what="the lease to expire")

    late = await report_finished_as(system, lease, exit_code=0, output_units=40.0)
    succeeded = await system.wait_for(lambda s: of_task(s, "task.succeeded", task_id), what="the task to succeed")
    system.kill_agent("h100-a", signal.SIGCONT)

    assert [(e.data.lease_id, e.data.output_units) for e in succeeded] == [(lease_id, 40.0)]
    assert succeeded[0].causation_id == late.event_id
    await asyncio.sleep(2 * system.timings.lease_ttl_s)  # time for a wrong re-grant to show
    await system.poll()
    assert [e.data.lease_id for e in of_task(system, "lease.granted", task_id)] == [lease_id]
    assert system.views[task_id].state is TaskState.SUCCEEDED


async def report_finished_as(system: RunningSystem, lease: Any, *, exit_code: int, output_units: float) -> Envelope:
    """The lease's agent's `report.finished`, with the lease's own fencing token, onto `cf:reports`."""
    report = make_event(
        TaskFinished, subject=agent_subject(lease.agent_id), subject_seq=1_000_000, producer=f"agent/{lease.agent_id}",
        actor=f"agent:{lease.agent_id}",
        data={"agent_id": lease.agent_id, "lease_id": lease.lease_id, "task_id": lease.task_id,
              "fencing_token": lease.fencing_token, "exit_code": exit_code, "output_units": output_units},
    )  # fmt: skip
    await system.redis.xadd(REPORTS_STREAM, wire_fields(report))
    return report
