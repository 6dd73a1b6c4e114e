"""The ledger's SQL count of an account's usage is the pure rule the dispatcher folds
(`shared.scheduling.quota_balance.counted_gpu_seconds`): equal on generated accounts and usage — both the
running total each account keeps (started by its grant, added to by every statement that records usage)
and the whole window re-summed (`USED_GPU_SECONDS_SQL`), with accounts granted before, between and after
the batches of usage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.runtime import Emitter, prepare_schema
from services.ledger.quotas import USED_GPU_SECONDS_SQL, grant_quota, load_quota_status
from services.ledger.service import SPEC
from services.ledger.store import INSERT_INCREMENTS_SQL
from shared.delivery.db import create_pool
from shared.scheduling.quota_balance import QuotaTerms, UsageSlice, used_gpu_seconds
from shared.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROJECTS = st.sampled_from(["a", "b"])
CARDS = st.sampled_from(["H100", "L40S"])
MINUTE = st.integers(0, 600)


@st.composite
def slices(draw: st.DrawFn) -> UsageSlice:
    start = draw(MINUTE)
    return UsageSlice(draw(PROJECTS), draw(CARDS), start * 60.0, (start + draw(st.integers(1, 120))) * 60.0 + 0.5,
                      draw(st.integers(1, 8)))


@st.composite
def accounts(draw: st.DrawFn) -> QuotaTerms:
    start = draw(MINUTE)
    return QuotaTerms(f"q{draw(st.integers(0, 10**6))}", draw(PROJECTS), draw(st.none() | CARDS), 100.0,
                      start * 60.0 + 0.25, (start + draw(st.integers(1, 300))) * 60.0)


@pytest.fixture
async def ledger_dsn(fresh_settings: Settings) -> AsyncIterator[str]:
    pool = await create_pool(fresh_settings.database_dsn or "")
    try:
        await prepare_schema(pool, SPEC)
    finally:
        await pool.close()
    yield fresh_settings.database_dsn or ""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


EMITTER = Emitter("ledger", "ledger/test", "user:test")


async def grant(conn: asyncpg.Connection, account: QuotaTerms) -> None:
    await grant_quota(conn, EMITTER, project=account.project, gpu_hours=100.0, valid_from=at(account.valid_from),
                      valid_to=at(account.valid_to), card_type=account.card_type, account_id=account.account_id)


async def record(conn: asyncpg.Connection, usage: list[UsageSlice], first: int) -> None:
    """One batch's increments, written by the ledger's own statement (which adds them to the running totals)."""
    leases = [f"L{first + n}" for n in range(len(usage))]
    await conn.execute(
        INSERT_INCREMENTS_SQL, leases, [at(u.start) for u in usage], [at(u.end) for u in usage], ["t"] * len(usage),
        [u.project for u in usage], [u.card_type for u in usage], [u.gpus for u in usage], [0] * len(usage),
        [0] * len(usage), ["e"] * len(usage), [0] * len(usage),
    )  # fmt: skip


async def sql_counts(dsn: str, terms: list[QuotaTerms], usage: list[UsageSlice]) -> tuple[dict[str, float], dict[str, float]]:
    """Each account's running total and its window re-summed, after granting a third of the accounts before
    the usage, a third between its two batches and the rest after (rolled back)."""
    conn = await asyncpg.connect(dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        third, half = -(-len(terms) // 3), len(usage) // 2
        for step, accounts_now in enumerate((terms[:third], terms[third:2 * third], terms[2 * third:])):
            for account in accounts_now:
                await grant(conn, account)
            if step < 2:
                await record(conn, usage[:half] if step == 0 else usage[half:], step * half)
        running = {s.account_id: float(s.used_gpu_hours) * 3600 for s in await load_quota_status(conn)}
        resummed = {row["account_id"]: float(row["used"]) for row in await conn.fetch(
            f"SELECT q.account_id, {USED_GPU_SECONDS_SQL} AS used FROM ledger.quotas q")}  # fmt: skip
        await transaction.rollback()
        return running, resummed
    finally:
        await conn.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(terms=st.lists(accounts(), min_size=1, max_size=4, unique_by=lambda a: a.account_id),
       usage=st.lists(slices(), max_size=12))  # fmt: skip
def test_the_ledgers_sql_counts_what_the_pure_rule_counts(ledger_dsn: str, terms: list[QuotaTerms],
                                                            usage: list[UsageSlice]) -> None:
    running, resummed = asyncio.run(sql_counts(ledger_dsn, terms, usage))
    for account in terms:
        assert running[account.account_id] == pytest.approx(used_gpu_seconds(account, usage), abs=1e-6)
        assert resummed[account.account_id] == pytest.approx(used_gpu_seconds(account, usage), abs=1e-6)
