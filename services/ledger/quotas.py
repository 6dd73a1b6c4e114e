"""Quota accounts: granting one (a ledger command), measuring its use, raising its alerts once.

- `grant_quota` writes a `ledger.quotas` row and its `quota.granted` event in the caller's
  transaction (`cardflow quota grant` runs it with a ledger `Emitter`); the event carries what the
  account already counts (its window may start in the past), and it is taken under the usage lock
  (`lock_usage`) every batch that records usage also takes, so a consumer that adds later
  `usage.recorded` events to it (the dispatcher) counts each slice exactly once;
- what an account has used: the usage increments of its project (and card type, if it has one) that
  fall inside its validity window, cut at the window's edges — in SQL, the sum
  `shared.scheduling.quota_balance.counted_gpu_seconds` defines (a property test holds them equal);
  kept as a running total (`ledger.quotas.used_gpu_seconds`): a grant starts it at the usage already in
  its window, every batch that records usage adds what its increments count (`count_for_quotas_sql`, in
  the statement that writes them, under the usage lock), a change of the window counts it again
  (`recount_used`); `load_quota_status` reads it, one row per account, and what is left follows
  `quota_balance.remaining_gpu_hours`;
- `alerts_due` (pure) says which alerts an account is owed: one `quota.threshold_crossed` per
  threshold reached, one `quota.expiring` once `valid_to - alert lead` has passed with hours left;
- `check_quotas` is the ledger's periodic loop: it raises what is due, each alert once (a row in
  `ledger.quota_alerts`, in the same transaction as the event).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import asyncpg

from services.common.runtime import Emitter, ServiceContext
from shared.events.emission import Emission
from shared.delivery.migrations import advisory_key
from shared.events import (
    Envelope,
    QuotaExpiring,
    QuotaExpiringData,
    QuotaGranted,
    QuotaGrantedData,
    QuotaThresholdCrossed,
    QuotaThresholdCrossedData,
    new_event_id,
    utcnow,
)
from shared.events.subjects import quota_subject

SCHEMA = "ledger"
DEFAULT_THRESHOLDS = (0.8, 0.95)
DEFAULT_ALERT_LEAD_DAYS = 15.0
LATE_USAGE_GRACE = timedelta(days=1)
"""Thresholds are still checked this long after an account expires (usage is recorded with a lag)."""

_CHECK_LOCK = advisory_key("quota-check", SCHEMA)
USAGE_LOCK = advisory_key("quota-usage", SCHEMA)
"""Held (transaction-scoped) by every batch that records usage and by every quota grant or change."""

_COUNTED_SECONDS = "i.gpus * extract(epoch FROM least(i.to_at, q.valid_to) - greatest(i.from_at, q.valid_from))"
_COUNTS = (
    "i.project = q.project AND (q.card_type IS NULL OR i.card_type = q.card_type)"
    " AND i.to_at > q.valid_from AND i.from_at < q.valid_to"
)
"""Increment `i` counts for account `q`: its project (and card type, if the account has one), inside its window."""

USED_GPU_SECONDS_SQL = (
    f"coalesce((SELECT sum({_COUNTED_SECONDS}) FROM {SCHEMA}.usage_increments i WHERE {_COUNTS}), 0)"
)
"""What account `q` counts: `quota_balance.used_gpu_seconds` over `ledger.usage_increments`, in SQL — the
whole window re-summed; run once when an account's window is set (`grant_quota`, `recount_used`)."""


def count_for_quotas_sql(*ctes: str) -> str:
    """One statement adding to each account's running total (`ledger.quotas.used_gpu_seconds`) what the
    increments of the CTE `counted` count inside its window (as `USED_GPU_SECONDS_SQL` counts them).

    `ctes` are the statement's CTEs (`name AS (…)`, e.g. an `INSERT … RETURNING`; data-modifying ones must be
    at the top level); `counted` yields `project, card_type, gpus, from_at, to_at, sign`: `sign` 1 adds an
    increment, -1 takes it back (an increment moved to another project). Run under the usage lock
    (`lock_usage`), like everything that changes what an account counts.
    """
    return (
        f"WITH {', '.join(ctes)}"
        f" UPDATE {SCHEMA}.quotas total SET used_gpu_seconds = total.used_gpu_seconds + d.seconds"
        f" FROM (SELECT q.account_id, sum(i.sign * {_COUNTED_SECONDS}) AS seconds"
        f" FROM counted i JOIN {SCHEMA}.quotas q ON {_COUNTS} GROUP BY q.account_id) d"
        " WHERE total.account_id = d.account_id"
    )


async def recount_used(conn: asyncpg.Connection, account_id: str) -> None:
    """Count an account's running total again over its whole window (after its window changed), under the usage lock."""
    await conn.execute(
        f"UPDATE {SCHEMA}.quotas q SET used_gpu_seconds = {USED_GPU_SECONDS_SQL} WHERE q.account_id = $1", account_id,
    )


async def lock_usage(conn: asyncpg.Connection) -> None:
    """Serialise recording usage with counting it for a quota event (until the transaction ends)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", USAGE_LOCK)


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """An account and what its project has used of it so far."""

    account_id: str
    project: str
    card_type: str | None
    gpu_hours: Decimal
    valid_from: datetime
    valid_to: datetime
    alert_lead_days: float
    thresholds: tuple[float, ...]
    used_gpu_hours: Decimal
    changed_by: str | None = None  # who granted or last changed the account
    changed_at: datetime | None = None

    @property
    def remaining_gpu_hours(self) -> Decimal:
        return max(self.gpu_hours - self.used_gpu_hours, Decimal(0))

    @property
    def used_share(self) -> float:
        return float(self.used_gpu_hours / self.gpu_hours)


@dataclass(frozen=True, slots=True)
class QuotaAlert:
    """An alert an account is owed: `kind` 'threshold' (with its threshold) or 'expiring' (threshold 0)."""

    account: QuotaStatus
    kind: str
    threshold: float

    @property
    def key(self) -> tuple[str, float]:
        return self.kind, self.threshold


async def grant_quota(
    conn: asyncpg.Connection,
    emitter: Emitter,
    *,
    project: str,
    gpu_hours: float,
    valid_from: datetime,
    valid_to: datetime,
    alert_lead_days: float = DEFAULT_ALERT_LEAD_DAYS,
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    card_type: str | None = None,
    account_id: str | None = None,
    actor: str | None = None,
    reason: str = "",
) -> Envelope:
    """Create a quota account and its `quota.granted` event (in the caller's transaction)."""
    account_id = account_id or f"{project}-{new_event_id().lower()}"
    await lock_usage(conn)
    used = await conn.fetchval(
        f"SELECT {USED_GPU_SECONDS_SQL} FROM (SELECT $1::text AS project, $2::text AS card_type,"
        " $3::timestamptz AS valid_from, $4::timestamptz AS valid_to) q", project, card_type, valid_from, valid_to,
    ) if valid_to > valid_from else 0
    data = QuotaGrantedData(
        account_id=account_id,
        project=project,
        gpu_hours=gpu_hours,
        card_type=card_type,
        valid_from=valid_from,
        valid_to=valid_to,
        alert_lead_days=alert_lead_days,
        thresholds=tuple(sorted(thresholds)),
        reason=reason,
        used_gpu_hours=float(used) / 3600,
    )  # validates: positive hours, forward window, thresholds within 0..1
    [event] = await emitter.emit(conn, [Emission(QuotaGranted, quota_subject(data.account_id), data, actor=actor)])
    await conn.execute(
        f"INSERT INTO {SCHEMA}.quotas (account_id, project, gpu_hours, card_type, valid_from, valid_to,"
        " alert_lead_days, thresholds, granted_at, granted_by, event_id, changed_at, changed_by, used_gpu_seconds)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $9, $10, $12)",
        data.account_id, data.project, Decimal(str(data.gpu_hours)), data.card_type, data.valid_from,
        data.valid_to, data.alert_lead_days, list(data.thresholds), event.occurred_at, event.actor, event.event_id,
        used,
    )  # fmt: skip
    await record_quota_change(conn, event, QuotaChangeRow("grant", data.gpu_hours, data.gpu_hours, data.valid_to))
    return event


@dataclass(frozen=True, slots=True)
class QuotaChangeRow:
    """One line of an account's history (`ledger.quota_changes`)."""

    change: str  # grant | adjust | renew
    delta_gpu_hours: float
    gpu_hours: float  # after the change
    valid_to: datetime  # after the change


async def record_quota_change(conn: asyncpg.Connection, event: Envelope, row: QuotaChangeRow) -> None:
    """Append the change its event announces to the account's history (the event's actor and reason)."""
    await conn.execute(
        f"INSERT INTO {SCHEMA}.quota_changes (account_id, revision, change, delta_gpu_hours, gpu_hours, valid_to,"
        " used_gpu_hours, reason, actor, changed_at, event_id)"
        f" SELECT $1, coalesce(max(revision), 0) + 1, $2, $3, $4, $5, $6, $7, $8, $9, $10"
        f" FROM {SCHEMA}.quota_changes WHERE account_id = $1",
        event.data.account_id, row.change, Decimal(str(row.delta_gpu_hours)), Decimal(str(row.gpu_hours)),
        row.valid_to, Decimal(str(event.data.used_gpu_hours or 0.0)), event.data.reason, event.actor,
        event.occurred_at, event.event_id,
    )  # fmt: skip


async def load_quota_status(
    conn: asyncpg.Connection | asyncpg.Pool, *, active_at: datetime | None = None, account_id: str | None = None,
) -> list[QuotaStatus]:
    """Every account (or those in force at `active_at`, grace included; or one) with its used GPU-hours."""
    rows = await conn.fetch(
        f"SELECT q.account_id, q.project, q.card_type, q.gpu_hours, q.valid_from, q.valid_to, q.alert_lead_days,"
        " q.thresholds, q.changed_by, q.changed_at, q.used_gpu_seconds / 3600 AS used_gpu_hours"
        f" FROM {SCHEMA}.quotas q"
        f" WHERE ($1::timestamptz IS NULL OR (q.valid_from <= $1 AND q.valid_to + $2::interval > $1))"
        f"   AND ($3::text IS NULL OR q.account_id = $3)"
        f" ORDER BY q.project, q.valid_from, q.account_id",
        active_at,
        LATE_USAGE_GRACE,
        account_id,
    )
    return [QuotaStatus(**{**dict(row), "thresholds": tuple(row["thresholds"])}) for row in rows]


def alerts_due(account: QuotaStatus, now: datetime, raised: set[tuple[str, float]]) -> list[QuotaAlert]:
    """The alerts `account` is owed at `now` that are not in `raised` (pure)."""
    due = [QuotaAlert(account, "threshold", t) for t in account.thresholds if account.used_share >= t]
    expiring_from = account.valid_to - timedelta(days=account.alert_lead_days)
    if expiring_from <= now < account.valid_to and account.remaining_gpu_hours > 0:
        due.append(QuotaAlert(account, "expiring", 0.0))
    return [alert for alert in due if alert.key not in raised]


def alert_emission(alert: QuotaAlert) -> Emission:
    account = alert.account
    subject = quota_subject(account.account_id)
    if alert.kind == "expiring":
        data = QuotaExpiringData(
            account_id=account.account_id, project=account.project, valid_to=account.valid_to,
            remaining_gpu_hours=float(account.remaining_gpu_hours),
        )  # fmt: skip
        return Emission(QuotaExpiring, subject, data)
    crossed = QuotaThresholdCrossedData(
        account_id=account.account_id, project=account.project, threshold=alert.threshold,
        used_gpu_hours=float(account.used_gpu_hours), total_gpu_hours=float(account.gpu_hours),
    )  # fmt: skip
    return Emission(QuotaThresholdCrossed, subject, crossed)


async def raise_due_alerts(conn: asyncpg.Connection, emitter: Emitter, now: datetime) -> list[Envelope]:
    """Emit every alert due at `now` and record it, so it is never raised again."""
    if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _CHECK_LOCK):
        return []  # another ledger instance is checking right now
    raised: dict[str, set[tuple[str, float]]] = {}
    for row in await conn.fetch(f"SELECT account_id, kind, threshold FROM {SCHEMA}.quota_alerts"):
        raised.setdefault(row["account_id"], set()).add((row["kind"], row["threshold"]))
    due = [a for s in await load_quota_status(conn, active_at=now) for a in alerts_due(s, now, raised.get(s.account_id, set()))]
    if not due:
        return []
    events = await emitter.emit(conn, [alert_emission(alert) for alert in due])
    await conn.executemany(
        f"INSERT INTO {SCHEMA}.quota_alerts (account_id, kind, threshold, used_gpu_hours, event_id)"
        " VALUES ($1, $2, $3, $4, $5)",
        [(a.account.account_id, a.kind, a.threshold, a.account.used_gpu_hours, e.event_id) for a, e in zip(due, events)],
    )
    return events


async def check_quotas(ctx: ServiceContext) -> None:
    """The ledger's periodic loop: raise the quota alerts that are due now."""
    async with ctx.transaction() as conn:
        await raise_due_alerts(conn, ctx.emitter, utcnow())
