"""A consumer process for the crash tests: applies `test.happened` events exactly once.

Environment: the `CARDFLOW_*` backend variables, plus
    CF_TEST_STREAM, CF_TEST_GROUP, CF_TEST_SCHEMA   where to consume and write
    CF_TEST_MIN_IDLE_MS                             claimer bound (default 300)
    CF_TEST_CRASH_AFTER_COMMIT=1                    SIGKILL itself right after the first commit,
                                                    before the entry is acked
Runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from faststream.redis import RedisBroker

from shared.delivery import create_pool, reliable_subscriber
from shared.settings import get_settings
from tests.helpers.delivery_support import TestHappened, apply_once, parse_test_event, prepare_worker_schema


async def main() -> None:
    settings = get_settings()
    stream, group, schema = (os.environ[f"CF_TEST_{name}"] for name in ("STREAM", "GROUP", "SCHEMA"))
    crash_after_commit = os.environ.get("CF_TEST_CRASH_AFTER_COMMIT") == "1"
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=4)
    await prepare_worker_schema(pool, schema)
    broker = RedisBroker(settings.redis_url or "", log_level=logging.WARNING)

    @reliable_subscriber(
        broker, stream=stream, group=group, parse=parse_test_event,
        min_idle_ms=int(os.environ.get("CF_TEST_MIN_IDLE_MS", "300")), claim_interval_ms=50,
    )  # fmt: skip
    async def apply(event: TestHappened) -> None:
        await apply_once(pool, schema, group, event)
        if crash_after_commit:
            os.kill(os.getpid(), signal.SIGKILL)  # committed, not acked

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await broker.start()
    await stop.wait()
    await broker.stop()
    await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
