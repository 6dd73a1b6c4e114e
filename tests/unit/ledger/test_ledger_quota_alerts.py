"""Which quota alerts are due: thresholds reached, expiry within the alert lead, never twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from services.ledger.quotas import QuotaStatus, alerts_due

START = datetime(2025, 1, 1, tzinfo=UTC)
END = START + timedelta(days=90)


def an_account(used: str, total: str = "100", lead_days: float = 15.0) -> QuotaStatus:
    return QuotaStatus("acct-1", "proj-a", None, Decimal(total), START, END, lead_days, (0.8, 0.95), Decimal(used))


def keys(account: QuotaStatus, now: datetime, raised: set[tuple[str, float]] | None = None) -> list[tuple[str, float]]:
    return [alert.key for alert in alerts_due(account, now, raised or set())]


def test_thresholds_are_due_once_reached() -> None:
    mid = START + timedelta(days=10)
    assert keys(an_account("79.99"), mid) == []
    assert keys(an_account("80"), mid) == [("threshold", 0.8)]
    assert keys(an_account("99"), mid) == [("threshold", 0.8), ("threshold", 0.95)]
    assert keys(an_account("99"), mid, {("threshold", 0.8)}) == [("threshold", 0.95)]


def test_expiring_is_due_within_the_alert_lead_while_hours_remain() -> None:
    assert keys(an_account("10"), END - timedelta(days=15, seconds=1)) == []
    assert keys(an_account("10"), END - timedelta(days=15)) == [("expiring", 0.0)]
    assert keys(an_account("10", lead_days=30), END - timedelta(days=20)) == [("expiring", 0.0)]
    assert keys(an_account("100"), END - timedelta(days=1)) == [("threshold", 0.8), ("threshold", 0.95)]
    assert keys(an_account("10"), END) == []
    assert keys(an_account("10"), END - timedelta(days=1), {("expiring", 0.0)}) == []


def test_remaining_and_share() -> None:
    account = an_account("120")
    assert account.remaining_gpu_hours == 0 and account.used_share == 1.2
