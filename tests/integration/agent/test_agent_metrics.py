"""`cardflow agent` with CARDFLOW_METRICS_PORT serves the agent's own gauges (docs/operations.md)."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from agent_support import Dispatcher, of_type, wait_for_reports
from shared.settings import Settings
from tests.helpers.agent_process import agent_process
from tests.helpers.console_server import free_port
from tests.helpers.prometheus_text import samples, value

AGENT = "metrics-a"


async def _scrape(port: int, ready: object) -> dict:
    """The agent's /metrics once `ready(found)` holds (the gauges are set at each heartbeat)."""
    deadline = asyncio.get_running_loop().time() + 60
    async with httpx.AsyncClient() as client:
        while True:
            try:
                found = samples((await client.get(f"http://127.0.0.1:{port}/metrics")).text)
                if ready(found):  # type: ignore[operator]
                    return found
            except httpx.TransportError:
                pass  # not listening yet
            assert asyncio.get_running_loop().time() < deadline, "the agent's /metrics never showed the run"
            await asyncio.sleep(0.2)


async def test_the_agent_serves_its_connection_runs_gpus_and_commands(fresh_settings: Settings, redis: Redis) -> None:
    port = free_port()
    args = ("--id", AGENT, "--sim", "H100x2", "--heartbeat", "0.2", "--time-scale", "10")
    async with agent_process(fresh_settings, *args, env={"CARDFLOW_METRICS_PORT": str(port)}) as agent:
        await wait_for_reports(redis, lambda r: bool(of_type(r, "report.registered")))
        dispatcher = Dispatcher(redis, AGENT)
        await dispatcher.grant("L1", "T1", (1,), fencing_token=7, estimated_runtime_s=100_000.0)
        await dispatcher.grant("L1", "T1", (1,), fencing_token=7, estimated_runtime_s=100_000.0)  # re-sent: ignored

        def running(found: dict) -> bool:
            return value(found, "cardflow_agent_runs_active", agent=AGENT) == 1 and value(
                found, "cardflow_agent_commands_total", agent=AGENT, decision="ignore") == 1  # fmt: skip

        found = await _scrape(port, running)
        assert value(found, "cardflow_agent_connected", agent=AGENT) == 1
        assert value(found, "cardflow_agent_leases_held", agent=AGENT) == 1
        assert value(found, "cardflow_agent_commands_total", agent=AGENT, decision="start") == 1
        assert value(found, "cardflow_agent_registrations_total", agent=AGENT) >= 1
        assert value(found, "cardflow_agent_reports_unsent", agent=AGENT) == 0
        gpus = {labels["gpu"]: v for labels, v in found["cardflow_agent_gpu_utilisation_percent"] if labels["agent"] == AGENT}
        assert set(gpus) == {"0", "1"} and gpus["0"] == 0 and gpus["1"] > 0  # only GPU 1 runs the task
        code = await agent.stop(60)
    assert code == 0, agent.stderr()
