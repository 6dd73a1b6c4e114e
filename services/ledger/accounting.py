"""Usage arithmetic of one lease (pure): exact GPU-seconds between two instants, and their cost.

A lease is charged from its grant to its end: `gpu_seconds = gpus x (until - opened_at)`, counted
in whole microseconds (PostgreSQL's time resolution), so it is exact. `cost = gpu_seconds x price
/ 3600`, rounded half-even to `COST_QUANTUM`. Each increment is the difference between two such
totals, so the increments of a lease always add up to the cost of its whole duration, to the last
digit, however many renewals accounted it on the way.

Utilisation (for the match review): an increment whose `lease.renewed` / `lease.released` reported
the mean utilisation of the lease's GPUs adds its GPU-seconds to `util_gpu_seconds` and that share
of them to `busy_gpu_seconds`; `busy / util` is the lease's mean utilisation, time-weighted over the
intervals that reported it (`mean_util_pct`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

COST_QUANTUM = Decimal("0.000001")
"""Costs are kept to a millionth of the catalog currency."""

_MICROSECONDS_PER_SECOND = Decimal(1_000_000)
_SECONDS_PER_HOUR = Decimal(3600)
_PERCENT = Decimal(100)


def gpu_seconds_between(gpus: int, start: datetime, end: datetime) -> Decimal:
    """GPU-seconds of `gpus` GPUs held from `start` to `end` (0 if `end` is not after `start`)."""
    elapsed = max(end - start, timedelta(0))
    microseconds = (elapsed.days * 86_400 + elapsed.seconds) * 1_000_000 + elapsed.microseconds
    return Decimal(gpus) * Decimal(microseconds) / _MICROSECONDS_PER_SECOND


def cost_of(gpu_seconds: Decimal, price_per_gpu_hour: Decimal) -> Decimal:
    """The cost of `gpu_seconds` at `price_per_gpu_hour`, rounded to `COST_QUANTUM`."""
    return (gpu_seconds * price_per_gpu_hour / _SECONDS_PER_HOUR).quantize(COST_QUANTUM, ROUND_HALF_EVEN)


def price_of(price_per_gpu_hour: float) -> Decimal:
    """A catalog price as an exact decimal (12.29 stays 12.29, not its binary approximation)."""
    return Decimal(str(price_per_gpu_hour))


@dataclass(frozen=True, slots=True)
class LeaseAccount:
    """One lease's usage so far (a row of `ledger.lease_usage`)."""

    lease_id: str
    task_id: str
    project: str
    card_type: str
    gpus: int
    price_per_gpu_hour: Decimal
    opened_at: datetime
    accounted_until: datetime
    gpu_seconds: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    closed_at: datetime | None = None
    close_reason: str | None = None
    idle_gpu_seconds: Decimal = Decimal(0)  # GPU-seconds its GPUs sat under the idle threshold (the dispatcher's count)
    util_gpu_seconds: Decimal = Decimal(0)  # GPU-seconds of the intervals whose utilisation was reported
    busy_gpu_seconds: Decimal = Decimal(0)  # those GPU-seconds x the utilisation reported for each (util % / 100)
    time_scale: float = 1.0  # the node's clock speed (lease.granted): a simulated agent's --time-scale, real 1
    last_checkpoint_at: datetime | None = None  # the run's last checkpoint, as `lease.released` said (a loss counts from it)

    @property
    def mean_util_pct(self) -> float | None:
        """Mean GPU utilisation, time-weighted over the intervals that reported it; None if none did."""
        return mean_util_pct(self.busy_gpu_seconds, self.util_gpu_seconds)

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True, slots=True)
class Increment:
    """Usage accounted by one step: the interval, and the GPU-seconds and cost it added."""

    lease_id: str
    from_at: datetime
    to_at: datetime
    gpu_seconds: Decimal
    cost: Decimal
    idle_gpu_seconds: Decimal = Decimal(0)


def joined(first: Increment, later: Increment) -> Increment:
    """One lease's two consecutive increments as one (the later starts where the first ends): the same
    interval, GPU-seconds, cost and idle share in all, so every sum over increments stays what it was."""
    if later.lease_id != first.lease_id or later.from_at != first.to_at:
        raise ValueError(f"increments of lease {first.lease_id} are not consecutive: {first} then {later}")
    return Increment(first.lease_id, first.from_at, later.to_at, first.gpu_seconds + later.gpu_seconds,
                     first.cost + later.cost, first.idle_gpu_seconds + later.idle_gpu_seconds)


def with_idle(account: LeaseAccount, increment: Increment, idle_gpu_seconds: float) -> tuple[LeaseAccount, Increment]:
    """The increment with the idle GPU-seconds the dispatcher counted over it (at most the increment)."""
    idle = min(Decimal(str(idle_gpu_seconds)), increment.gpu_seconds)
    if idle <= 0:
        return account, increment
    return (replace(account, idle_gpu_seconds=account.idle_gpu_seconds + idle),
            replace(increment, idle_gpu_seconds=idle))


def with_utilisation(account: LeaseAccount, increment: Increment, util_pct: float | None) -> LeaseAccount:
    """The account after an increment whose GPUs averaged `util_pct` busy (None: not reported, nothing
    counted): the increment's GPU-seconds count as reported, `util_pct` of them as busy."""
    if util_pct is None or increment.gpu_seconds <= 0:
        return account
    busy = increment.gpu_seconds * Decimal(str(util_pct)) / _PERCENT
    return replace(account, util_gpu_seconds=account.util_gpu_seconds + increment.gpu_seconds,
                   busy_gpu_seconds=account.busy_gpu_seconds + busy)


def mean_util_pct(busy_gpu_seconds: Decimal, util_gpu_seconds: Decimal) -> float | None:
    """Busy over reported GPU-seconds, in percent (the time-weighted mean utilisation); None without reports."""
    return float(busy_gpu_seconds / util_gpu_seconds * _PERCENT) if util_gpu_seconds > 0 else None


def advance(account: LeaseAccount, until: datetime) -> tuple[LeaseAccount, Increment | None]:
    """Account the lease up to `until`; None when that adds nothing (closed, or not later)."""
    if not account.is_open or until <= account.accounted_until:
        return account, None
    gpu_seconds = gpu_seconds_between(account.gpus, account.opened_at, until)
    cost = cost_of(gpu_seconds, account.price_per_gpu_hour)
    increment = Increment(
        account.lease_id, account.accounted_until, until, gpu_seconds - account.gpu_seconds, cost - account.cost
    )
    return replace(account, accounted_until=until, gpu_seconds=gpu_seconds, cost=cost), increment


def close(account: LeaseAccount, ended_at: datetime, reason: str,
          last_checkpoint_at: datetime | None = None) -> tuple[LeaseAccount, Increment | None]:
    """Account up to `ended_at` and close the lease, keeping when its run last checkpointed (a second close
    changes nothing)."""
    if not account.is_open:
        return account, None
    advanced, increment = advance(account, ended_at)
    closed = replace(advanced, closed_at=max(ended_at, advanced.accounted_until), close_reason=reason,
                     last_checkpoint_at=last_checkpoint_at)
    return closed, increment
