"""The ledger's SQL count of an account's usage is the pure rule the dispatcher folds
(`shared.scheduling.quota_balance.counted_gpu_seconds`): equal on generated accounts and usage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.runtime import prepare_schema
from services.ledger.quotas import load_quota_status
from services.ledger.service import SPEC
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


async def sql_counts(dsn: str, terms: list[QuotaTerms], usage: list[UsageSlice]) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    try:
        transaction = conn.transaction()
        await transaction.start()
        for n, piece in enumerate(usage):
            await conn.execute(
                "INSERT INTO ledger.usage_increments (lease_id, from_at, to_at, task_id, project, card_type, gpus,"
                " gpu_seconds, cost, event_id) VALUES ($1, $2, $3, 't', $4, $5, $6, 0, 0, 'e')",
                f"L{n}", at(piece.start), at(piece.end), piece.project, piece.card_type, piece.gpus,
            )
        for account in terms:
            await conn.execute(
                "INSERT INTO ledger.quotas (account_id, project, gpu_hours, card_type, valid_from, valid_to,"
                " alert_lead_days, thresholds, granted_by, event_id) VALUES ($1, $2, 100, $3, $4, $5, 15, '{}', 'x', 'e')",
                account.account_id, account.project, account.card_type, at(account.valid_from), at(account.valid_to),
            )
        counted = {s.account_id: float(s.used_gpu_hours) * 3600 for s in await load_quota_status(conn)}
        await transaction.rollback()
        return counted
    finally:
        await conn.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(terms=st.lists(accounts(), min_size=1, max_size=4, unique_by=lambda a: a.account_id),
       usage=st.lists(slices(), max_size=12))  # fmt: skip
def test_the_ledgers_sql_counts_what_the_pure_rule_counts(ledger_dsn: str, terms: list[QuotaTerms],
                                                            usage: list[UsageSlice]) -> None:
    counted = asyncio.run(sql_counts(ledger_dsn, terms, usage))
    for account in terms:
        assert counted[account.account_id] == pytest.approx(used_gpu_seconds(account, usage), abs=1e-6)
