"""The one set of quota rules (`quota_balance`): properties of counting, and what covers a task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.leasing.records import LeaseBook, QuotaRecord
from shared.leasing.task_facets import apply_events
from shared.leasing.work import LeaseRules
from shared.scheduling.quota_balance import (
    Coverage,
    QuotaTerms,
    UsageSlice,
    counted_gpu_seconds,
    coverage,
    used_gpu_seconds,
)
from tests.unit.dispatcher.builders import quota_granted, usage_recorded

HOUR = 3600.0
times = st.floats(0, 100 * HOUR)
slices = st.builds(lambda p, c, a, d, g: UsageSlice(p, c, a, a + d, g), st.sampled_from("ab"),
                   st.sampled_from(["H100", "L40S"]), times, st.floats(1, 10 * HOUR), st.integers(1, 8))
terms = st.builds(lambda i, p, c, a, d: QuotaTerms(f"q{i}", p, c, 100.0, a, a + d), st.integers(0, 99),
                  st.sampled_from("ab"), st.none() | st.sampled_from(["H100", "L40S"]), times, st.floats(1, 50 * HOUR))


@given(account=terms, piece=slices, cut=st.floats(0, 1))
def test_cutting_a_slice_in_two_counts_the_same(account: QuotaTerms, piece: UsageSlice, cut: float) -> None:
    middle = piece.start + cut * (piece.end - piece.start)
    halves = [UsageSlice(piece.project, piece.card_type, piece.start, middle, piece.gpus),
              UsageSlice(piece.project, piece.card_type, middle, piece.end, piece.gpus)]
    assert used_gpu_seconds(account, halves) == pytest.approx(counted_gpu_seconds(account, piece), abs=1e-6)


@given(account=terms, piece=slices)
def test_an_account_counts_at_most_the_slice_and_nothing_it_does_not_apply_to(account: QuotaTerms,
                                                                               piece: UsageSlice) -> None:
    counted = counted_gpu_seconds(account, piece)
    assert 0 <= counted <= piece.gpus * (piece.end - piece.start) + 1e-6
    if not account.applies_to(piece.project, piece.card_type):
        assert counted == 0


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@settings(max_examples=50)
@given(usage=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60), st.integers(1, 4),
                                st.sampled_from(["H100", "L40S"])), max_size=10),
       granted_after=st.integers(0, 10), card=st.none() | st.sampled_from(["H100", "L40S"]))
def test_the_dispatcher_counts_what_the_ledger_counts_wherever_the_grant_falls(usage, granted_after, card) -> None:
    """The grant carries what the ledger counted before it; the dispatcher adds every later slice."""
    window = (T0 + timedelta(minutes=30), T0 + timedelta(minutes=150))
    events = [usage_recorded("p", m * 60.0 * g, f"L{n}", start=T0 + timedelta(minutes=s), card_type=c,
                             end=T0 + timedelta(minutes=s + m), gpus=g) for n, (s, m, g, c) in enumerate(usage)]
    account = QuotaTerms("acct-p", "p", card, 10.0, window[0].timestamp(), window[1].timestamp())
    pieces = [UsageSlice("p", c, (T0 + timedelta(minutes=s)).timestamp(), (T0 + timedelta(minutes=s + m)).timestamp(), g)
              for s, m, g, c in usage]
    before = used_gpu_seconds(account, pieces[:granted_after])
    grant = quota_granted("p", 10.0, valid_from=window[0], valid_for=window[1] - window[0], card_type=card,
                          used_gpu_hours=before / HOUR)
    effects = apply_events(LeaseBook(), [grant, *events[granted_after:]], T0, LeaseRules())
    assert effects.accounts["acct-p"].used_gpu_seconds == pytest.approx(used_gpu_seconds(account, pieces), abs=1e-6)
    assert isinstance(effects.accounts["acct-p"], QuotaRecord)


def acct(account_id: str, card: str | None = None, start: float = 0.0, end: float = 100 * HOUR) -> QuotaTerms:
    return QuotaTerms(account_id, "p", card, 10.0, start, end)


@pytest.mark.parametrize(("accounts", "card", "expected", "about"), [
    ([], "H100", Coverage.UNLIMITED, None),
    ([acct("h", "H100")], "L40S", Coverage.UNLIMITED, None),
    ([acct("h", "H100")], "H100", Coverage.COVERED, None),
    ([acct("old", end=HOUR)], "H100", Coverage.EXPIRED, "old"),
    ([acct("old", end=HOUR), acct("soon", start=20 * HOUR)], "H100", Coverage.NOT_YET_VALID, "soon"),
    ([acct("short", end=10.5 * HOUR), acct("long")], "H100", Coverage.EXPIRES_FIRST, "short"),
])
def test_coverage(accounts: list[QuotaTerms], card: str, expected: Coverage, about: str | None) -> None:
    for ordered in (accounts, list(reversed(accounts))):
        verdict = coverage(ordered, {}, "p", card, need_gpu_hours=1.0, runtime_s=HOUR, now=10 * HOUR)
        assert verdict.coverage is expected
        assert (verdict.account.account_id if verdict.account else None) == about


def test_every_account_in_force_must_have_the_hours_left() -> None:
    accounts = [acct("a"), acct("h", "H100")]
    verdict = coverage(accounts, {"a": 5.0, "h": 0.5}, "p", "H100", need_gpu_hours=1.0, runtime_s=HOUR, now=10 * HOUR)
    assert (verdict.coverage, verdict.account.account_id) == (Coverage.EXHAUSTED, "h")
    ok = coverage(accounts, {"a": 5.0, "h": 0.5}, "p", "L40S", need_gpu_hours=1.0, runtime_s=HOUR, now=10 * HOUR)
    assert ok.coverage is Coverage.COVERED and [a.account_id for a in ok.paying] == ["a"]
