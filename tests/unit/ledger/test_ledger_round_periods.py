"""Round periods (pure): aligned to Monday multiples, from the policy in force unless overridden."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.ledger.rounds import next_boundary, period_floor
from services.ledger.service import LedgerSettings, RoundPeriods
from shared.config import POLICY, validate_document

WEEK = timedelta(days=7)


def test_weekly_rounds_start_on_mondays_at_midnight_utc() -> None:
    wednesday = datetime(2026, 12, 2, 15, 30, tzinfo=UTC)
    assert period_floor(wednesday, WEEK) == datetime(2026, 11, 30, tzinfo=UTC)  # a Monday
    assert next_boundary(datetime(2026, 11, 30, tzinfo=UTC), WEEK) == datetime(2026, 12, 7, tzinfo=UTC)
    assert next_boundary(wednesday, WEEK) == datetime(2026, 12, 7, tzinfo=UTC)


def test_the_round_period_comes_from_the_policy_unless_overridden() -> None:
    assert RoundPeriods(LedgerSettings(round_period_days=None)).value == timedelta(days=7)
    assert RoundPeriods(LedgerSettings(round_period_days=1.5)).value == timedelta(days=1.5)
    monthly = validate_document(POLICY, "rounds:\n  period_days: 30\n").model
    assert monthly.rounds.period_days == 30
