"""No GPU is ever in two leases at once, checked from the event log under packing and preemption."""

from __future__ import annotations

import random
from typing import Any

from shared.events import TaskState
from tests.helpers.system import RunningSystem, double_leases, gpu_intervals


def a_task(name: str, priority_class: str, gpus: int, hours: float) -> dict[str, Any]:
    return {"name": name, "project": "packing", "priority_class": priority_class, "gpus": gpus, "min_vram_gb": 80,
            "estimate_gpu_hours": hours, "profile": "compute", "checkpoint": {"interval_minutes": 5}}  # fmt: skip


async def test_no_gpu_is_leased_twice_while_tasks_pack_and_core_work_preempts(system: RunningSystem) -> None:
    rng = random.Random(5)
    system.start_agent("h100-a", "H100x8", time_scale=2000)
    fillers = [a_task(f"filler-{n:02d}", "opportunistic", rng.choice((1, 2, 3)), rng.uniform(2, 6)) for n in range(16)]
    await system.submit(fillers)
    await system.wait_for(lambda s: sum(v.state is TaskState.RUNNING for v in s.views.values()) >= 3,
                          what="opportunistic work to fill the node")  # fmt: skip
    core = [a_task(f"core-{n:02d}", "core", rng.choice((2, 4, 8)), rng.uniform(2, 8)) for n in range(6)]
    await system.submit(core)

    await system.wait_for(lambda s: len(s.views) == 22 and all(v.is_terminal for v in s.views.values()),
                          timeout=120, what="every task to end")  # fmt: skip

    assert all(v.state is TaskState.SUCCEEDED for v in system.views.values())
    assert {e.data.reason for e in system.of_type("lease.released")} >= {"succeeded", "preempted"}
    assert len(gpu_intervals(system.events)) > 40
    assert double_leases(system.events) == []
