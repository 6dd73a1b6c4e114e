"""Quota accounts' promised GPU-seconds (`shared.leasing.promises`): the kept sums (`KeptPromises`) equal the
count from scratch after any puts, account changes and moves of `now` (forward, back, past ends and window
edges), and the count is the quota rule's (`quota_balance.counted_gpu_seconds` of the slice from now to the
estimated end), to the microsecond."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.leasing.promises import (
    AccountWindow,
    KeptPromises,
    Promise,
    micros,
    now_micros,
    promised_gpu_us,
    quota_account,
)
from shared.leasing.records import QuotaRecord
from shared.scheduling.quota_balance import UsageSlice, counted_gpu_seconds
from tests.unit.dispatcher.builders import NOW

LEASES = [f"L{i}" for i in range(4)]
MINUTE_US = 60 * 1_000_000
minutes = st.integers(-10, 20)
promises = st.builds(lambda project, card, end, gpus: Promise(project, card, micros(NOW) + end * MINUTE_US, gpus),
                     st.sampled_from(["proj-a", "proj-b"]), st.sampled_from(["H100", "A10"]), minutes, st.integers(1, 4))
accounts = st.builds(lambda account_id, project, card, start, length: QuotaRecord(
    account_id, project, 10.0, card, NOW + timedelta(minutes=start), NOW + timedelta(minutes=start + length)),
    st.sampled_from(["q1", "q2", "q3"]), st.sampled_from(["proj-a", "proj-b"]), st.sampled_from([None, "H100"]),
    st.integers(-30, 10), st.sampled_from([15, 40, 600]))


def fresh(records: dict[str, QuotaRecord], held: dict[str, Promise], now: float) -> dict:
    return {account_id: quota_account(record, promised_gpu_us(AccountWindow.of(record), held.values(), now_micros(now)))
            for account_id, record in records.items()}


@settings(max_examples=400, deadline=None)
@given(first=st.dictionaries(st.sampled_from(LEASES), promises), first_accounts=st.lists(accounts, min_size=1),
       steps=st.lists(st.one_of(
           st.tuples(st.just("put"), st.sampled_from(LEASES), st.none() | promises),
           st.tuples(st.just("account"), accounts, st.booleans()),
           st.tuples(st.just("used"), st.sampled_from(["q1", "q2", "q3"]), st.floats(0, 1e5)),
           st.tuples(st.just("now"), st.sampled_from([0, 1, 60, 300, 600, -1, -300, -600]), st.just(None)),
       ), max_size=30))
def test_the_kept_promises_equal_a_count_from_scratch(first, first_accounts, steps) -> None:
    kept, held = KeptPromises(first), dict(first)
    records = {account.account_id: account for account in first_accounts}
    now = NOW.timestamp() + 0.25
    assert kept.quotas(records.values(), now) == fresh(records, held, now)
    for kind, subject, value in steps:
        if kind == "put":
            kept.put(subject, value)
            held.pop(subject, None) if value is None else held.__setitem__(subject, value)
        elif kind == "account":
            if value or subject.account_id not in records:
                records[subject.account_id] = subject  # new, or its window, project or card type changed
            else:
                del records[subject.account_id]
        elif kind == "used" and subject in records:
            records[subject] = replace(records[subject], used_gpu_seconds=value)
        elif kind == "now":
            now += subject
        assert kept.quotas(records.values(), now) == fresh(records, held, now)


@given(promise=promises, account=accounts, now=st.integers(-30 * 60, 60 * 60))
def test_the_count_is_the_quota_rules_from_now_to_the_estimated_end(promise, account, now) -> None:
    now_s = NOW.timestamp() + now + 0.5
    piece = UsageSlice(promise.project, promise.card_type, now_s, promise.end_us / 1_000_000, promise.gpus)
    promised = promised_gpu_us(AccountWindow.of(account), [promise], now_micros(now_s)) / 1_000_000
    assert promised == pytest.approx(counted_gpu_seconds(account.terms(), piece), abs=1e-6)


def test_an_account_counts_the_rest_of_its_leases_estimates_inside_its_window() -> None:
    account = QuotaRecord("q1", "proj-a", 10.0, None, NOW, NOW + timedelta(hours=2), used_gpu_seconds=3600.0)
    kept = KeptPromises({"L1": Promise("proj-a", "H100", micros(NOW + timedelta(hours=1)), 2),
                         "L2": Promise("proj-a", "H100", micros(NOW + timedelta(hours=3)), 1),
                         "L3": Promise("proj-b", "H100", micros(NOW + timedelta(hours=1)), 8)})
    assert kept.quotas([account], NOW.timestamp())["q1"].remaining_gpu_hours == 10 - 1 - 2 - 2
    kept.put("L2", None)
    assert kept.quotas([account], (NOW + timedelta(minutes=30)).timestamp())["q1"].remaining_gpu_hours == 10 - 1 - 1
    assert kept.quotas([account], (NOW + timedelta(hours=1)).timestamp())["q1"].remaining_gpu_hours == 10 - 1


def test_a_lease_whose_estimate_moved_later_still_counts_once_its_old_end_has_passed() -> None:
    account = QuotaRecord("q1", "proj-a", 10.0, None, NOW - timedelta(hours=1), NOW + timedelta(hours=2))
    kept = KeptPromises({"L1": Promise("proj-a", "H100", micros(NOW + timedelta(minutes=6)), 2)})
    assert kept.quotas([account], NOW.timestamp())["q1"].remaining_gpu_hours == 10 - 2 * 6 / 60
    kept.put("L1", Promise("proj-a", "H100", micros(NOW + timedelta(minutes=18)), 2))  # its old end stays in the heap
    assert kept.quotas([account], (NOW + timedelta(minutes=12)).timestamp())["q1"].remaining_gpu_hours == 10 - 2 * 6 / 60
