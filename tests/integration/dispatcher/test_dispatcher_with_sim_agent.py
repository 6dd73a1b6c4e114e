"""The dispatcher with a real simulated agent (`services.agent`, `--sim H100x2`): preemption,
checkpoint and resume, every lease released exactly once, every task done."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

from services.agent.build import AgentOptions, build_daemon
from shared.settings import Settings
from tests.integration.dispatcher.harness import FAST, DispatcherHarness
from tests.unit.dispatcher.builders import a_ready_task


@contextlib.asynccontextmanager
async def sim_agent(settings: Settings, agent_id: str, spec: str, time_scale: float) -> AsyncIterator[None]:
    options = AgentOptions(agent_id=agent_id, sim=spec, time_scale=time_scale, heartbeat_s=0.2,
                           register_every_s=1.0, data_dir=settings.data_dir)
    daemon = build_daemon(options, settings.redis_url or "")
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)


async def test_core_work_preempts_a_simulated_run_which_resumes_and_both_finish(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h, sim_agent(fresh_settings, "sim1", "H100x2", time_scale=600):
        h.start(config=FAST.model_copy(update={"lease_ttl_s": 5.0}))
        # 1200 s estimated on H100 = 2 s real at this scale; a checkpoint every 60 s = 0.1 s real
        await h.publish(*a_ready_task("O1", [("H100", 1200.0, 1.0)], gpus=2, priority_class="opportunistic",
                                      checkpoint_minutes=1))
        await h.wait_for_events("task.checkpointed")
        await h.publish(*a_ready_task("C1", [("H100", 300.0, 1.0)], gpus=2, priority_class="core"))
        succeeded = await h.wait_for_events("task.succeeded", 2)
        requeued = await h.events("task.requeued")
        grants = await h.events("lease.granted")
        released = await h.events("lease.released")
        rejected = await h.fetch("SELECT reason FROM dispatcher.rejected_reports")

    assert sorted(e.data.task_id for e in succeeded) == ["C1", "O1"]
    assert [(e.data.task_id, e.data.reason) for e in requeued] == [("O1", "preempted")]
    resume_from = requeued[0].data.resume_from
    assert resume_from is not None
    assert [(g.data.task_id, g.data.resume_from) for g in grants] == [("O1", None), ("C1", None), ("O1", resume_from)]
    assert Counter(e.data.lease_id for e in released) == Counter(g.data.lease_id for g in grants)
    assert sorted(e.data.reason for e in released) == ["preempted", "succeeded", "succeeded"]
    assert rejected == []
    # every grant carries the node's registered clock speed (the match review scales runtimes by it), and
    # a release the mean utilisation the agent reported since the last renewal (the sim agent: 90 % while it runs)
    assert {g.data.time_scale for g in grants} == {600.0}
    assert all(e.data.gpu_util_pct is None or 0 <= e.data.gpu_util_pct <= 90 for e in released)
