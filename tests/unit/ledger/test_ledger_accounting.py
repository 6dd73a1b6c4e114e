"""Usage arithmetic: exact GPU-seconds, cost rounding, increments that add up to the whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from services.ledger.accounting import COST_QUANTUM, LeaseAccount, advance, close, cost_of, gpu_seconds_between, price_of

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def a_lease(gpus: int = 2, price: str = "12.29") -> LeaseAccount:
    return LeaseAccount("L1", "T1", "proj-a", "H100", gpus, Decimal(price), T0, T0)


def test_gpu_seconds_are_exact_to_the_microsecond() -> None:
    assert gpu_seconds_between(4, T0, T0 + timedelta(hours=1, microseconds=250)) == Decimal("14400.001")
    assert gpu_seconds_between(3, T0, T0 - timedelta(seconds=5)) == 0


def test_cost_is_gpu_hours_times_price_rounded_half_even() -> None:
    assert cost_of(Decimal(7200), Decimal("12.29")) == Decimal("24.580000")
    assert cost_of(Decimal(1), Decimal("0.0018")) == Decimal("0.000000")  # 0.0000005: half to even (down)
    assert cost_of(Decimal(1), Decimal("0.0054")) == Decimal("0.000002")  # 0.0000015: half to even (up)
    assert price_of(12.29) == Decimal("12.29")


def test_renewal_then_close_account_the_whole_lease() -> None:
    lease, first = advance(a_lease(), T0 + timedelta(seconds=30))
    assert first is not None and first.gpu_seconds == 60 and first.from_at == T0
    lease, last = close(lease, T0 + timedelta(seconds=95), "succeeded")
    assert last is not None and last.gpu_seconds == 130 and last.from_at == T0 + timedelta(seconds=30)
    assert lease.gpu_seconds == 190 and lease.cost == cost_of(Decimal(190), Decimal("12.29"))
    assert lease.closed_at == T0 + timedelta(seconds=95) and lease.close_reason == "succeeded"


def test_nothing_is_accounted_twice_or_backwards() -> None:
    lease, _ = advance(a_lease(), T0 + timedelta(seconds=30))
    same, none = advance(lease, T0 + timedelta(seconds=30))
    earlier, none_either = advance(lease, T0 + timedelta(seconds=10))
    assert none is None and none_either is None and same == lease == earlier
    closed, _ = close(lease, T0 + timedelta(seconds=60), "failed")
    assert close(closed, T0 + timedelta(seconds=90), "failed") == (closed, None)
    assert advance(closed, T0 + timedelta(seconds=90)) == (closed, None)


@given(
    gpus=st.integers(1, 16),
    price=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("50"), places=2),
    steps=st.lists(st.integers(1, 10**9), min_size=1, max_size=20),
)
def test_increments_add_up_to_the_cost_of_the_whole_duration(gpus: int, price: Decimal, steps: list[int]) -> None:
    lease = a_lease(gpus, str(price))
    total_seconds, total_cost, at = Decimal(0), Decimal(0), T0
    for microseconds in steps:
        at += timedelta(microseconds=microseconds)
        lease, increment = advance(lease, at)
        assert increment is not None and increment.gpu_seconds > 0
        total_seconds += increment.gpu_seconds
        total_cost += increment.cost
    assert total_seconds == gpu_seconds_between(gpus, T0, at) == lease.gpu_seconds
    assert total_cost == cost_of(total_seconds, price) == lease.cost
    assert lease.cost == (total_seconds * price / 3600).quantize(COST_QUANTUM)
