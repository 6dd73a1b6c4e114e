"""A service started while its Redis stalls waits for it instead of dying at start.

redis-py gives up on a call after its socket timeout (5 s by default) with `redis.exceptions.
TimeoutError`. A subscriber's start makes such calls (creating its consumer group), and when one
of them overran — a Redis stalled on a busy machine (a parallel `make test` once had a dispatcher die
this way), restarting, or not up yet — the exception ended the whole service. The Redis here is
frozen with SIGSTOP for longer than the socket timeout while the service starts, then thawed: the
service must be running afterwards and do its work (intake turns a submission into `task.submitted`).
Redis of its own: freezing the session's Redis would stall every other test of this worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

from redis.asyncio import Redis

from services.common.runtime import run_service
from services.intake.service import SPEC as INTAKE
from shared.embedded import Backends
from tests.helpers.running_services import poll_until
from tests.integration.conftest import fresh_database_settings
from tests.integration.intake.harness import a_submission, xadd_ingest

FROZEN_S = 7.0  # longer than redis-py's 5 s socket timeout


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def intake_events(redis: Redis) -> list[bytes]:
    return [fields[b"type"] for _, fields in await redis.xrange(f"cf:events:{INTAKE.name}") if b"type" in fields]


async def test_a_service_started_while_redis_stalls_runs_once_redis_answers(own_backends: Backends) -> None:
    assert own_backends.endpoints is not None
    [redis_server] = [p for p in own_backends.processes if p.name == "redis"]
    async with fresh_database_settings(own_backends.endpoints) as settings:
        stop = asyncio.Event()
        with frozen(redis_server.record.pid):
            service = asyncio.create_task(run_service(INTAKE, settings, stop))
            await asyncio.sleep(FROZEN_S)
        redis = Redis.from_url(settings.redis_url or "")
        try:
            await asyncio.sleep(2)
            assert not service.done(), f"intake stopped at start: {service.exception()!r}"
            await xadd_ingest(redis, "task.submit", a_submission())
            published = await poll_until(lambda: intake_events(redis), timeout=60)
            assert b"task.submitted" in published, f"intake published {published} after the stall"
            assert not service.done()
        finally:
            stop.set()
            await asyncio.wait_for(service, 30)
            await redis.aclose()
