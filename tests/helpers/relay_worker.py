"""An outbox-relay process for the crash tests: publishes a schema's outbox until it is empty.

Environment: the `CARDFLOW_*` backend variables, plus
    CF_TEST_SCHEMA                 whose outbox to publish
    CF_TEST_CRASH_AFTER_XADD=1     SIGKILL itself after the XADD pipeline, before rows are marked
Exits 0 when nothing is left to publish.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence

import asyncpg
from redis.asyncio import Redis

from shared.delivery import OutboxRelay, create_pool
from shared.settings import get_settings


class CrashingRelay(OutboxRelay):
    """Dies between publishing and marking, as a relay killed at the worst moment would."""

    async def _mark_sent(self, conn: asyncpg.Connection, rows: Sequence[asyncpg.Record], entry_ids: list[str]) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


async def main() -> None:
    settings = get_settings()
    relay_class = CrashingRelay if os.environ.get("CF_TEST_CRASH_AFTER_XADD") == "1" else OutboxRelay
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=2)
    redis = Redis.from_url(settings.redis_url or "")
    relay = relay_class(pool, redis, os.environ["CF_TEST_SCHEMA"])
    while await relay.publish_pending():
        pass
    await redis.aclose()
    await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
