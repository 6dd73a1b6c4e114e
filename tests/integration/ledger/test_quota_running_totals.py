"""Each quota account's running total (`ledger.quotas.used_gpu_seconds`) against real PostgreSQL: equal to
its window re-summed (`quotas.USED_GPU_SECONDS_SQL`) after many batches of usage, at the window's edges and
after a renewal moved one, across a restart of the ledger service, with usage of a lease seen before its
task; and the quota check reads one row per account, whatever the usage inside the windows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import asyncpg
import pytest

from services.common.runtime import Emitter, prepare_schema
from services.ledger.quota_changes import QuotaChangeRequest, change_quota
from services.ledger.quotas import USED_GPU_SECONDS_SQL, grant_quota, load_quota_status
from services.ledger.service import build_spec
from services.ledger.store import INSERT_INCREMENTS_SQL
from shared.delivery import create_pool
from shared.events.ledger import QuotaChange
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.unit.ledger.builders import granted, released, renewed, submitted

pytestmark = pytest.mark.integration

EMITTER = Emitter("ledger", "ledger/test", "user:test")
T = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


@pytest.fixture
async def ledger_pool(fresh_settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(fresh_settings.database_dsn, min_size=1, max_size=2)
    await prepare_schema(pool, build_spec())
    yield pool
    await pool.close()


async def grant(conn: asyncpg.Connection | asyncpg.Pool, account_id: str, start: datetime, end: datetime,
                card_type: str | None = None, project: str = "proj-a") -> None:
    async with _connection(conn) as c, c.transaction():
        await grant_quota(c, EMITTER, project=project, gpu_hours=1000.0, valid_from=start, valid_to=end,
                          card_type=card_type, account_id=account_id)


def _connection(conn: asyncpg.Connection | asyncpg.Pool):  # type: ignore[no-untyped-def]
    return conn.acquire() if isinstance(conn, asyncpg.Pool) else _Same(conn)


class _Same:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def __aenter__(self) -> asyncpg.Connection:
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        return None


async def record(pool: asyncpg.Pool, intervals: list[tuple[datetime, datetime]], *, first: int, card: str = "H100",
                 gpus: int = 2) -> None:
    """One batch of increments (one lease each), by the ledger's own statement, under the usage lock."""
    n = len(intervals)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('unused'))")  # a transaction like a batch's
        await conn.execute(
            INSERT_INCREMENTS_SQL, [f"L{first + i}" for i in range(n)], [a for a, _ in intervals],
            [b for _, b in intervals], ["T"] * n, ["proj-a"] * n, [card] * n, [gpus] * n, [0] * n, [0] * n,
            ["E"] * n, [0] * n,
        )  # fmt: skip


async def running_and_resummed(pool: asyncpg.Pool) -> dict[str, tuple[Decimal, Decimal]]:
    rows = await pool.fetch(f"SELECT q.account_id, q.used_gpu_seconds, {USED_GPU_SECONDS_SQL} AS resummed"
                            " FROM ledger.quotas q ORDER BY q.account_id")  # fmt: skip
    return {row["account_id"]: (row["used_gpu_seconds"], row["resummed"]) for row in rows}


async def test_totals_equal_the_resummed_windows_after_many_increments_and_at_the_edges(ledger_pool: asyncpg.Pool) -> None:
    end = T + timedelta(hours=1)
    await grant(ledger_pool, "whole", T, end)
    await grant(ledger_pool, "l40s", T, end, card_type="L40S")
    await grant(ledger_pool, "other", T, end, project="proj-b")
    edges = [(T - 30 * MINUTE, T), (T - 30 * MINUTE, T + 30 * MINUTE), (end - 10 * MINUTE, end + 10 * MINUTE),
             (end, end + 30 * MINUTE), (T + timedelta(microseconds=1), T + timedelta(microseconds=2))]
    await record(ledger_pool, edges, first=0)
    await record(ledger_pool, edges[:2], first=100, card="L40S", gpus=1)
    for batch in range(40):  # 40 batches of 25 slices of one second and 7 µs
        start = T + timedelta(seconds=90 * batch)
        await record(ledger_pool, [(start + timedelta(seconds=s), start + timedelta(seconds=s + 1, microseconds=7))
                                   for s in range(25)], first=1000 + 25 * batch)
    totals = await running_and_resummed(ledger_pool)
    assert totals["whole"][0] == totals["whole"][1]
    assert totals["l40s"][0] == totals["l40s"][1] == Decimal(30 * 60)  # 1 GPU from T to T+30 min; the rest outside
    assert totals["other"] == (0, 0)
    # at the edges: 0 (ends at the start) + 30 min + 10 min (cut at the end) + 0 (starts at the end) + 1 µs, on 2
    # GPUs; the L40S batch's 30 min on 1 GPU (an account without a card type counts every card)
    slices = 2 * sum(min(1 + 7e-6, (end - T - timedelta(seconds=90 * b + s)).total_seconds()) for b in range(40)
                     for s in range(25) if T + timedelta(seconds=90 * b + s) < end)  # fmt: skip
    assert float(totals["whole"][0]) == pytest.approx(2 * (40 * 60 + 1e-6) + 30 * 60 + slices, abs=1e-5)

    async with ledger_pool.acquire() as conn, conn.transaction():  # a renewal moves the end: counted again
        await change_quota(conn, EMITTER, QuotaChangeRequest("whole", QuotaChange.RENEW, "next hour",
                                                             valid_to=end + timedelta(hours=1)), T)  # fmt: skip
    await record(ledger_pool, [(end + 40 * MINUTE, end + 50 * MINUTE)], first=5000)
    renewed_totals = await running_and_resummed(ledger_pool)
    assert renewed_totals["whole"][0] == renewed_totals["whole"][1]
    # the slice across the old end now whole (+10 min), the one after it (+30 min) and the new one (+10 min), on 2 GPUs
    assert renewed_totals["whole"][0] == totals["whole"][0] + 2 * (10 + 30 + 10) * 60


async def test_the_quota_check_reads_one_row_per_account_not_the_usage(ledger_pool: asyncpg.Pool) -> None:
    await grant(ledger_pool, "whole", T, T + timedelta(days=1))
    for batch in range(20):
        start = T + timedelta(minutes=batch)
        await record(ledger_pool, [(start + timedelta(seconds=s), start + timedelta(seconds=s + 1)) for s in range(250)],
                     first=250 * batch)  # fmt: skip
    async with ledger_pool.acquire() as conn, conn.transaction():
        before = await increments_read(conn)
        statuses = await load_quota_status(conn, active_at=T + timedelta(hours=1))
        read = await increments_read(conn) - before
    assert [float(s.used_gpu_hours) * 3600 for s in statuses] == [pytest.approx(2 * 5000)]
    assert read == 0  # before: the window re-summed, 5,000 increments by key, every 30 s


async def increments_read(conn: asyncpg.Connection) -> int:
    """Rows of `ledger.usage_increments` this backend read so far and has not reported yet (scans and index fetches)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return await conn.fetchval(
        "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'ledger' AND relname = 'usage_increments'")  # fmt: skip


async def lease_project(running: RunningServices, lease_id: str) -> str | None:
    rows = await running.fetch("SELECT project FROM ledger.lease_usage WHERE lease_id = $1 AND closed_at IS NOT NULL",
                               lease_id)  # fmt: skip
    return rows[0]["project"] if rows else None


async def test_totals_follow_the_service_across_a_restart_and_a_task_seen_after_its_lease(fresh_settings: Settings) -> None:
    from tests.unit.matcher.builders import T0

    end = T0 + timedelta(minutes=10)
    async with RunningServices(fresh_settings, build_spec()) as running:
        assert running.pool is not None
        await running.wait_until(lambda: _has_quotas(running))
        await grant(running.pool, "a", T0 + timedelta(seconds=20), end)
        await grant(running.pool, "h100", T0 - timedelta(hours=1), end, card_type="H100")
        await running.publish(granted("L1", "T1"), renewed("L1", "T1", at=T0 + timedelta(seconds=30)),
                              released("L1", "T1", ended_at=T0 + timedelta(seconds=45)))  # T1 not seen yet
        assert await running.wait_until(lambda: _is(lease_project(running, "L1"), "unknown"))
        await running.publish(submitted("T1"))
        assert await running.wait_until(lambda: _is(lease_project(running, "L1"), "proj-a"))
    async with RunningServices(fresh_settings, build_spec()) as running:  # the ledger restarted
        assert running.pool is not None
        await running.publish(submitted("T2"), granted("L2", "T2", gpus=1, at=T0 + timedelta(minutes=9)),
                              released("L2", "T2", gpus=1, granted_at=T0 + timedelta(minutes=9),
                                       ended_at=T0 + timedelta(minutes=11)))  # fmt: skip
        assert await running.wait_until(lambda: _is(lease_project(running, "L2"), "proj-a"))
        await grant(running.pool, "late", T0, end)  # granted after the usage: its window re-summed once
        totals = await running_and_resummed(running.pool)
    assert totals["a"] == (Decimal(2 * 25 + 60),) * 2  # L1 from T0+20 s to 45 s on 2 GPUs; L2 one minute inside
    assert totals["h100"] == totals["late"] == (Decimal(2 * 45 + 60),) * 2


async def _has_quotas(running: RunningServices) -> bool:
    return bool(await running.fetch("SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('ledger.quotas')"
                                    " AND attname = 'used_gpu_seconds'"))  # fmt: skip


async def _is(value: object, expected: str) -> bool:
    return await value == expected  # type: ignore[misc]
