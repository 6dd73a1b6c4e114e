"""A stopping process's pool closes within its limit even when a connection is never released, and
what that connection held is rolled back, not committed (shared.delivery.db.close_pool, real PostgreSQL)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from shared.delivery.db import close_pool, create_pool
from shared.settings import Settings


async def test_a_pool_with_a_connection_never_released_is_cut_after_the_limit(fresh_settings: Settings) -> None:
    table = "pool_close_probe"
    pool = await create_pool(fresh_settings.database_dsn, min_size=1, max_size=2)
    await pool.execute(f"CREATE TABLE IF NOT EXISTS {table} (n int)")
    held = await pool.acquire()  # a leaked task's connection: never released
    transaction = held.transaction()
    await transaction.start()
    await held.execute(f"INSERT INTO {table} VALUES (1)")

    async with asyncio.timeout(60):  # plain Pool.close() would wait here forever
        await close_pool(pool, timeout_s=0.5)

    with pytest.raises(asyncpg.InterfaceError):  # the held connection is gone
        await held.fetchval("SELECT 1")
    check = await create_pool(fresh_settings.database_dsn, min_size=1, max_size=1)
    try:
        assert await check.fetchval(f"SELECT count(*) FROM {table}") == 0, "the cut transaction was committed"
    finally:
        await check.execute(f"DROP TABLE {table}")
        await close_pool(check)


async def test_a_pool_whose_connections_come_back_closes_normally(fresh_settings: Settings) -> None:
    pool = await create_pool(fresh_settings.database_dsn, min_size=1, max_size=2)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT 1") == 1
    await close_pool(pool, timeout_s=5)
    assert pool.is_closing()
