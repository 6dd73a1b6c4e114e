"""A simulated agent against real Redis: registration, heartbeats, runs, checkpoints, preempt, revoke, failure."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys

import pytest
from redis.asyncio import Redis

from agent_support import Dispatcher, finished, of_type, running_agent, wait_for_reports
from services.agent.build import AgentOptions
from services.agent.sim_plan import resume_progress
from shared.names import AGENT_GROUP, agent_inbox
from shared.settings import Settings
from tests.helpers.agent_process import agent_process

AGENT = "sim-a1"


def sim_options(**overrides: object) -> AgentOptions:
    fields = {"agent_id": AGENT, "sim": "H100x4", "time_scale": 100.0, "heartbeat_s": 0.2, **overrides}
    return AgentOptions(**fields)  # type: ignore[arg-type]


async def test_registers_with_catalog_gpus_then_heartbeats_idle(fresh_settings: Settings, redis: Redis) -> None:
    async with running_agent(fresh_settings.redis_url, sim_options(node_id="rack1-n3")):
        found = await wait_for_reports(redis, lambda r: len(of_type(r, "report.heartbeat")) >= 3)
    registered = of_type(found, "report.registered")[0]
    assert found[0] is registered and registered.subject_seq == 1 and registered.subject == f"agent/{AGENT}"
    assert (registered.data.node_id, registered.data.card_type, registered.data.mode) == ("rack1-n3", "H100", "sim")
    assert [(g.index, g.vram_gb) for g in registered.data.gpus] == [(i, 80.0) for i in range(4)]
    assert registered.data.started_at is not None and registered.data.started_at <= registered.occurred_at
    heartbeat = of_type(found, "report.heartbeat")[0]
    assert heartbeat.data.leases == () and {g.util_pct for g in heartbeat.data.gpus} == {0.0}
    assert [r.subject_seq for r in found[:4]] == [1, 2, 3, 4]
    assert (await redis.xinfo_groups(agent_inbox(AGENT)))[0]["name"].decode() == AGENT_GROUP


async def test_runs_a_grant_with_checkpoints_and_success_under_its_token(fresh_settings: Settings, redis: Redis) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, sim_options()):
        await wait_for_reports(redis, lambda r: bool(of_type(r, "report.registered")))
        grant = await dispatcher.grant(
            "L1", "T1", (1, 2), fencing_token=41, estimated_runtime_s=300.0, checkpoint_interval_s=75.0
        )
        await wait_for_reports(redis, lambda r: bool(of_type(r, "report.checkpointed", "L1")))
        await dispatcher.resend(grant)  # redelivered: same message id
        await dispatcher.grant("L1", "T1", (1, 2), fencing_token=41, estimated_runtime_s=300.0)  # re-sent grant
        await dispatcher.grant("L2", "T2", (3,), fencing_token=42, estimated_runtime_s=50.0)  # barrier
        found = await wait_for_reports(redis, lambda r: finished("L1")(r) and finished("L2")(r))
    about_l1 = [r for r in found if getattr(r.data, "lease_id", None) == "L1"]
    assert {r.data.fencing_token for r in about_l1} == {41}
    assert all(r.causation_id == grant.event_id and r.correlation_id == grant.event_id for r in about_l1)
    checkpoints = of_type(found, "report.checkpointed", "L1")
    assert [round(c.data.progress, 6) for c in checkpoints] == [0.25, 0.5, 0.75]
    assert [resume_progress(c.data.checkpoint_uri, "T1") for c in checkpoints] == [0.25, 0.5, 0.75]
    (done,) = of_type(found, "report.finished", "L1")  # exactly one run despite the duplicates
    assert (done.data.exit_code, done.data.error, done.data.output_units) == (0, None, 100.0 * 300.0)
    running = [h for h in of_type(found, "report.heartbeat") if [x.lease_id for x in h.data.leases] == ["L1"]]
    assert running, "a heartbeat renewed L1 while it ran"
    gpus = {g.index: g.util_pct for g in running[-1].data.gpus}
    assert all(85.0 <= gpus[i] <= 98.0 for i in (1, 2)) and gpus[0] == 0.0


async def test_preempt_checkpoints_now_and_the_task_resumes_from_there(fresh_settings: Settings, redis: Redis) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, sim_options()):
        await dispatcher.grant("L1", "T1", (0,), fencing_token=5, estimated_runtime_s=100_000.0)
        await wait_for_reports(redis, lambda r: any(_progress_of(h, "L1") > 0 for h in of_type(r, "report.heartbeat")))
        await dispatcher.preempt("L1", "T1", token=4)  # stale token: ignored
        await dispatcher.preempt("L1", "T1", token=5)
        found = await wait_for_reports(redis, finished("L1"))
        (checkpoint,) = of_type(found, "report.checkpointed", "L1")
        (stopped,) = of_type(found, "report.finished", "L1")
        assert stopped.data.exit_code is None and stopped.data.error.startswith("preempted")
        assert found.index(checkpoint) < found.index(stopped)
        progress = resume_progress(checkpoint.data.checkpoint_uri, "T1")
        assert 0.0 < progress < 1.0 and checkpoint.data.progress == pytest.approx(progress, abs=1e-6)
        await dispatcher.grant("L2", "T1", (0,), fencing_token=6, estimated_runtime_s=100.0,
                               resume_from=checkpoint.data.checkpoint_uri)
        found = await wait_for_reports(redis, finished("L2"))
    (resumed,) = of_type(found, "report.finished", "L2")
    assert resumed.data.exit_code == 0 and resumed.data.fencing_token == 6
    assert resumed.data.output_units == pytest.approx((1.0 - progress) * 100.0 * 100.0, rel=1e-4)


async def test_revoke_without_checkpoint_and_injected_failure(fresh_settings: Settings, redis: Redis) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, sim_options()):
        await dispatcher.grant("L1", "T1", (0,), fencing_token=3, estimated_runtime_s=100_000.0,
                               checkpoint_interval_s=1_000_000.0)
        await dispatcher.grant("L2", "T2", (1,), fencing_token=4, estimated_runtime_s=200.0,
                               env={"CARDFLOW_SIM_FAIL_AT": "0.5", "CARDFLOW_SIM_EXIT_CODE": "3"})
        await wait_for_reports(redis, lambda r: any(h.data.leases for h in of_type(r, "report.heartbeat")))
        await dispatcher.revoke("L1", "T1", 3, reason="operator", checkpoint_first=False, detail="maintenance")
        found = await wait_for_reports(redis, lambda r: finished("L1")(r) and finished("L2")(r))
    (revoked,) = of_type(found, "report.finished", "L1")
    assert revoked.data.error.startswith("revoked: operator: maintenance") and revoked.data.exit_code is None
    assert of_type(found, "report.checkpointed", "L1") == []
    (failed,) = of_type(found, "report.finished", "L2")
    assert failed.data.exit_code == 3 and "simulated failure at progress 0.50" in failed.data.error
    assert failed.data.output_units == pytest.approx(0.5 * 100.0 * 200.0)


async def test_cardflow_agent_command_registers_and_stops_on_sigterm(fresh_settings: Settings, redis: Redis) -> None:
    async with agent_process(fresh_settings, "--id", "cli-a", "--sim", "T4x2", "--heartbeat", "0.2") as agent:
        found = await wait_for_reports(redis, lambda r: len(of_type(r, "report.heartbeat")) >= 2)
        registered = of_type(found, "report.registered")[0]
        assert registered.data.agent_id == "cli-a" and registered.data.card_type == "T4"
        code = await agent.stop(30)
    assert code == 0, agent.stderr()


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host may have NVIDIA GPUs")
async def test_cardflow_agent_real_without_nvml_exits_with_no_gpus_found(fresh_settings: Settings) -> None:
    env = {**os.environ, "CARDFLOW_REDIS_URL": fresh_settings.redis_url}
    command = [sys.executable, "-m", "services.cli.main", "agent", "--id", "real-a", "--real"]
    result = await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, timeout=60)
    assert result.returncode == 2
    assert b"no GPUs found" in result.stderr


async def test_stopping_the_agent_checkpoints_and_reports_its_runs(fresh_settings: Settings, redis: Redis) -> None:
    dispatcher = Dispatcher(redis, AGENT)
    async with running_agent(fresh_settings.redis_url, sim_options()):
        await dispatcher.grant("L1", "T1", (0,), fencing_token=5, estimated_runtime_s=100_000.0)
        await wait_for_reports(redis, lambda r: any(h.data.leases for h in of_type(r, "report.heartbeat")))
    found = await wait_for_reports(redis, finished("L1"), timeout=0.0)  # written before the agent returned
    (checkpoint,) = of_type(found, "report.checkpointed", "L1")
    (stopped,) = of_type(found, "report.finished", "L1")
    assert stopped.data.error.startswith("agent_stopped") and stopped.data.exit_code is None
    assert found.index(checkpoint) < found.index(stopped)


def _progress_of(heartbeat: object, lease_id: str) -> float:
    """The progress a heartbeat reports for a lease (-1 if it does not list it)."""
    held = [h for h in heartbeat.data.leases if h.lease_id == lease_id]  # type: ignore[attr-defined]
    return held[0].progress if held and held[0].progress is not None else -1.0
