"""The ledger's rounds loop against real PostgreSQL: until the first round closes it asks where that round
starts (the period boundary before the earliest usage) by one index row, not by reading every usage
increment each time, and the first round still starts there."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from services.audit.archive import prepare_archive
from services.common.runtime import Emitter, prepare_schema
from services.ledger.rounds import close_due_round, period_floor
from services.ledger.service import build_spec
from shared.delivery import create_pool
from shared.settings import Settings

pytestmark = pytest.mark.integration

PERIOD = timedelta(days=7)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # a Wednesday: its period started on Monday 2026-11-30
EMITTER = Emitter("ledger", "ledger/test", "system:rounds")


@pytest.fixture
async def ledger_pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(fresh_settings.database_dsn, min_size=1, max_size=2)
    await prepare_schema(pool, build_spec())
    await prepare_archive(pool)  # a round's close reads the archive too
    yield pool
    await pool.close()


async def add_increments(pool: asyncpg.Pool, starts: list[datetime]) -> None:
    """One minute of one GPU per start, each on a lease of its own, then ANALYZE (as autovacuum would)."""
    await pool.execute(
        "INSERT INTO ledger.usage_increments (lease_id, from_at, to_at, task_id, project, card_type, gpus,"
        " gpu_seconds, cost, event_id) SELECT 'L' || n, s, s + interval '1 minute', 'T' || n, 'proj', 'H100', 1, 60,"
        " 0.05, 'E' || n FROM unnest($1::timestamptz[]) WITH ORDINALITY AS u(s, n)", starts,
    )  # fmt: skip
    await pool.execute("ANALYZE ledger.usage_increments")


async def increments_read_by_sequential_scans(conn: asyncpg.Connection) -> int:
    """Rows of `ledger.usage_increments` read by sequential scans in this transaction so far."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return await conn.fetchval(
        "SELECT coalesce(sum(seq_tup_read), 0) FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'ledger' AND relname = 'usage_increments'"
    )


async def test_before_the_first_round_the_loop_reads_one_index_row_not_every_increment(
    ledger_pool: asyncpg.Pool,
) -> None:
    await add_increments(ledger_pool, [NOW - timedelta(hours=1, seconds=i) for i in range(5_000)])
    async with ledger_pool.acquire() as conn, conn.transaction():
        before = await increments_read_by_sequential_scans(conn)
        closed = await close_due_round(conn, None, EMITTER, NOW, PERIOD)
        read = await increments_read_by_sequential_scans(conn) - before
    assert closed is None  # all usage is in the period still running
    assert read == 0  # before: min(from_at) read all 5,000 increments, every 30 s


async def test_the_first_round_starts_at_the_boundary_before_the_earliest_usage(ledger_pool: asyncpg.Pool) -> None:
    async with ledger_pool.acquire() as conn, conn.transaction():
        assert await close_due_round(conn, None, EMITTER, NOW, PERIOD) is None  # nothing spent: no round
    earliest = NOW - timedelta(days=9)  # in the period before last
    await add_increments(ledger_pool, [NOW - timedelta(hours=2), earliest, NOW - timedelta(days=3)])
    async with ledger_pool.acquire() as conn, conn.transaction():
        closed = await close_due_round(conn, None, EMITTER, NOW, PERIOD)
    assert closed is not None
    assert (closed.starts_at, closed.ends_at) == (period_floor(earliest, PERIOD), period_floor(NOW, PERIOD))
