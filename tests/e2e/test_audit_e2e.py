"""The audit archive with every service running: `why` tells a preempted-then-resumed task's two
runs, and after services are killed mid-flow `verify` passes and replay equals the live state."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from services.audit.reading import archived_events, task_events
from services.audit.story import story_json, tell
from services.audit.verify import VerifyReport, verify_archive
from services.ledger.reviews import review_matches
from shared.events import TaskState
from shared.replay import ReplayState, replay_event
from shared.storage import open_object_store
from services.demo.supervisor import ChildSpec
from services.demo.system import cardflow_argv
from shared.settings import Settings
from tests.helpers.system import ALL_SERVICES, RunningSystem, double_leases, running_system

OPPORTUNISTIC = {
    "name": "sweep-filler", "project": "research", "priority_class": "opportunistic", "gpus": 8, "min_vram_gb": 80,
    "estimate_gpu_hours": 64, "profile": "compute", "checkpoint": {"interval_minutes": 5}, "output_unit": "samples",
    "labels": {"scenario": "sweep"},
}  # fmt: skip
CORE = {
    "name": "urgent-eval", "project": "llm", "priority_class": "core", "gpus": 8, "min_vram_gb": 80,
    "estimate_gpu_hours": 4, "profile": "compute", "output_unit": "evals",
}  # fmt: skip


async def verified(system: RunningSystem, settle_s: float = 20.0) -> VerifyReport:
    async with open_object_store(system.settings) as store:
        return await verify_archive(system.pool, store, settle_s=settle_s)


async def archiving(system: RunningSystem) -> bool:
    exists = await system.pool.fetchval("SELECT to_regclass('audit.events') IS NOT NULL")
    return exists and await system.pool.fetchval("SELECT count(*) FROM audit.events") > 0


def every_lease_ended(system: RunningSystem) -> bool:
    """Each granted lease (by id: a relay may deliver an event twice) released, expired or revoked."""
    granted = {e.data.lease_id for e in system.of_type("lease.granted")}
    ended = {e.data.lease_id for e in system.of_type("lease.released", "lease.expired", "lease.revoked")}
    return granted <= ended


def ledger_restarted_twice(system: RunningSystem) -> bool:
    (ledger,) = [child for child in system.supervisor.status() if child.name == "ledger"]
    return ledger.restarts >= 2 and ledger.running


def ledger_log_tail(system: RunningSystem) -> str:
    path = system.supervisor.log_path("ledger")
    lines = path.read_text(errors="replace").splitlines() if path.exists() else ["(no log)"]
    return "\n".join([line for line in lines if "[debug" not in line][-60:])


async def everything_archived(system: RunningSystem) -> bool:
    if not await system.pool.fetchval("SELECT to_regclass('audit.events') IS NOT NULL"):
        return False  # the ledger has not created its archive yet
    # by event id: a relay or the gate that dies after appending sends the same event again, and the
    # archive keeps one row per event (a second entry of the same id is not a second event)
    seen = list({event.event_id for event in system.events})
    archived = await system.pool.fetchval("SELECT count(*) FROM audit.events WHERE event_id = ANY($1::text[])", seen)
    return archived == len(seen)


async def test_why_tells_both_runs_of_a_preempted_then_resumed_task(system: RunningSystem) -> None:
    # 64 GPU-h on 8 GPUs = 8 h = 24 s real: the core task must reach the dispatcher and preempt the filler
    # inside its run, on a loaded machine too (with 9 s real it once finished first: one run, not two)
    system.start_agent("h100-a", "H100x8", time_scale=1200)
    await system.submit([OPPORTUNISTIC])
    filler = await system.wait_for(lambda s: s.task_by_name("sweep-filler"), timeout=120, what="the filler's view")
    await system.wait_for(lambda s: [e for e in s.of_type("task.checkpointed") if e.data.task_id == filler.id],
                          what="a checkpoint of the filler")  # fmt: skip
    await system.submit([CORE])
    await system.wait_for(lambda s: len(s.views) == 2 and all(v.state is TaskState.SUCCEEDED for v in s.views.values()),
                          timeout=120, what="both tasks to succeed")  # fmt: skip
    core = system.task_by_name("urgent-eval")
    assert core is not None
    await system.wait_for(everything_archived, what="the archive to catch up")

    story = story_json(tell(filler.id, await task_events(system.pool, filler.id)))

    assert story["state"] == "succeeded"
    first, second = story["runs"]
    assert first["end_reason"] == "preempted" and f"core task {core.id} needs the GPUs" in first["stopped_by"]
    assert first["checkpoints"] >= 1 and first["resumed_from"] is None
    assert second["resumed_from"] is not None and second["end_reason"] == "succeeded"
    sentences = [step["sentence"] for step in story["steps"]]
    kinds = [step["type"] for step in story["steps"]]
    assert kinds[0] == "task.submitted" and "scenario sweep" in sentences[0]
    assert any(s.startswith("matched to H100") for s in sentences)
    assert [k for k in kinds if k == "lease.granted"] == ["lease.granted", "lease.granted"]
    preempted = next(step for step in story["steps"] if step["type"] == "lease.revoked")
    assert preempted["actor"] == "service:dispatcher" and preempted["run"] == 1 and core.id in preempted["sentence"]
    requeued = next(step for step in story["steps"] if step["type"] == "task.requeued")
    assert requeued["reason"] == "preempted" and second["resumed_from"] in requeued["sentence"]
    assert story["steps"][-1]["type"] in ("task.succeeded", "usage.recorded", "lease.released")
    assert story["gpu_hours"] > 0 and story["cost"] > 0
    assert story["match"]["chosen"] == "H100" and story["match"]["ranking"][0]["card_type"] == "H100"

    # the match review of a run on a x1200 agent: runtimes in the agent's time, marked, with utilisation
    async def both_reviewed(s: RunningSystem) -> dict[str, Any] | None:
        tasks = {t["name"]: t for t in (await review_matches(s.pool))["tasks"]}
        return tasks if len(tasks) == 2 else None

    reviewed = await system.wait_for(both_reviewed, what="the match review of both tasks")
    urgent = reviewed["urgent-eval"]
    assert (urgent["time_scale"], urgent["simulated"]) == (1200.0, "simulated ×1200")
    assert urgent["runtime_s"] == pytest.approx(urgent["wall_runtime_s"] * 1200)
    assert urgent["ratio"] >= 0.99  # its lease spans the sim run's R / 1200 real seconds: at least R in agent time
    # urgent-eval runs 1.5 s real, often ending before the agent's first heartbeat (every 2 s): its
    # utilisation may be unknown (never guessed); the filler ran many heartbeats at the sim's 90 %
    assert urgent["util_pct"] is None or 0 < urgent["util_pct"] <= 90.0
    assert 0 < reviewed["sweep-filler"]["util_pct"] <= 90.0

    report = await verified(system)
    assert report.ok, json.dumps(report.as_json(), indent=1, default=str)


def mixed(count: int) -> list[dict[str, Any]]:
    classes = ("core", "standard", "opportunistic")
    return [
        {"name": f"job-{n:02d}", "project": ("llm", "vision")[n % 2], "priority_class": classes[n % 3],
         "gpus": (1, 2, 4)[n % 3], "min_vram_gb": (24, 80)[n % 2], "estimate_gpu_hours": 2.0 + n % 4,
         "profile": "compute", "checkpoint": {"interval_minutes": 10}, "output_unit": "samples"}
        for n in range(count)
    ]  # fmt: skip


@pytest.mark.timeout(600)  # 54 tasks, four kills and two restarts of the ledger, then a verify of the whole archive
async def test_after_services_are_killed_mid_flow_verify_passes_and_replay_equals_the_live_state(
    fresh_settings: Settings, data_dir_factory: Callable[[], Path],
) -> None:
    in_process = [name for name in ALL_SERVICES if name != "ledger"]
    async with running_system(fresh_settings, data_dir_factory(), services=in_process) as system:
        # the ledger (and its archiver) as a supervised process: SIGKILLed, restarted by its supervisor
        system.supervisor.start([ChildSpec("ledger", cardflow_argv("service", "ledger"), restart=True)])
        for agent_id, sim in (("h100-a", "H100x8"), ("l40s-a", "L40Sx8")):
            system.start_agent(agent_id, sim, time_scale=3000)
        await system.submit(mixed(24))
        await system.wait_for(lambda s: len(s.of_type("lease.granted")) >= 4, what="the first grants")
        await system.wait_for(archiving, timeout=180, what="the ledger to start archiving")
        system.supervisor.kill("ledger", signal.SIGKILL)
        for name in ("views", "dispatcher", "matcher"):  # killed mid-flow, then started again
            await system.kill_service(name)
        await system.submit(mixed(30)[24:])
        for name in ("views", "dispatcher", "matcher"):
            system.start_service(name)
        await system.wait_for(lambda s: len(s.views) == 30 and all(v.is_terminal for v in s.views.values()),
                              timeout=180, what="30 terminal tasks")  # fmt: skip
        await system.wait_for(every_lease_ended, what="every lease ended")
        system.supervisor.kill("ledger", signal.SIGKILL)  # once more, while it may still be archiving the tail
        # the supervisor notices the death on its next poll: wait for the restart, not only for the archive
        # (which may already be complete, so the status read right after the kill could still show one restart)
        await system.wait_for(lambda _: ledger_restarted_twice(system), timeout=60, what="the ledger's second restart")
        try:
            await system.wait_for(everything_archived, timeout=240, what="the archive to catch up")
        except AssertionError as missing:
            raise AssertionError(f"{missing}\nthe ledger's log:\n{ledger_log_tail(system)}") from None
        await _check_verify_and_replay(system)


async def _check_verify_and_replay(system: RunningSystem) -> None:
    report = await verified(system, settle_s=60.0)
    assert report.ok, json.dumps(report.as_json(), indent=1, default=str)
    assert report.compared["tasks"] == 30 and report.compared["leases"] == len(system.of_type("lease.granted"))
    assert double_leases(system.events) == []

    replayed = ReplayState()
    async for item in archived_events(system.pool):
        replay_event(replayed, item.event)
    live = {row["id"]: row["state"] for row in await system.pool.fetch("SELECT id, state FROM views.tasks")}
    assert {task_id: view.state.value for task_id, view in replayed.tasks.items()} == live
    ledger = {row["lease_id"]: (row["gpu_seconds"], row["cost"])
              for row in await system.pool.fetch("SELECT lease_id, gpu_seconds, cost FROM ledger.lease_usage")}  # fmt: skip
    # a lease that ended before any usage was recorded (granted, then lost while services were killed)
    # has a ledger row of zeros and no usage.recorded event: zero in the archive too, as verify counts it
    replayed_usage = {lease: (t.gpu_seconds, t.cost) for lease, t in replayed.usage_by_lease().items()}
    assert set(replayed_usage) <= set(ledger)
    assert {lease: replayed_usage.get(lease, (Decimal(0), Decimal(0))) for lease in ledger} == ledger
    assert {e.event_id for e in system.events} <= {item.event.event_id async for item in archived_events(system.pool)}
