"""The per-test isolation fixture really isolates: a new database and an empty Redis db each time."""

from __future__ import annotations

import asyncpg
from redis.asyncio import Redis

from shared.settings import Settings


async def test_fresh_settings_gives_an_empty_database_and_redis(fresh_settings: Settings) -> None:
    conn = await asyncpg.connect(fresh_settings.database_dsn)
    try:
        tables = await conn.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        await conn.execute("CREATE TABLE leftover (x int)")
    finally:
        await conn.close()
    redis = Redis.from_url(fresh_settings.redis_url)
    try:
        assert await redis.dbsize() == 0
        await redis.set("leftover", 1)
    finally:
        await redis.aclose()
    assert tables == 0


async def test_the_next_test_does_not_see_the_leftovers(fresh_settings: Settings) -> None:
    await test_fresh_settings_gives_an_empty_database_and_redis(fresh_settings)
