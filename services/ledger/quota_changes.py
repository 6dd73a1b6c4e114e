"""Changing a quota account after its grant: adjust its GPU-hours, renew its validity; its history.

    event = await change_quota(conn, emitter, QuotaChangeRequest(account_id, QuotaChange.RENEW, valid_to=...,
                                                                 reason="next quarter"), now)

Both are ledger commands run in the caller's transaction (the console's `POST /v1/quotas/{id}/adjust`
and `/renew` run them with a ledger `Emitter` whose actor is the caller), like `quotas.grant_quota`:

1. the usage lock (`quotas.lock_usage`), then the account row, locked;
2. the new terms are checked (`new_terms`, pure): more than 0 GPU-hours left to grant, an end after
   the start, a renewal ends later than before;
3. the account's usage is counted again under the new terms (`quotas.recount_used`: a changed window
   counts differently; its running total goes on from there), and goes into `quota.adjusted` (`used_gpu_hours`) with the change, the actor and the reason;
4. the row, its history line (`ledger.quota_changes`) and the event commit together; alerts the
   change made untrue (a threshold no longer reached, an expiry no longer near) are re-armed, so
   they are raised again when they come true again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from services.ledger.quotas import (
    SCHEMA,
    QuotaChangeRow,
    alerts_due,
    load_quota_status,
    lock_usage,
    record_quota_change,
    recount_used,
)
from shared.events import Envelope, QuotaAdjusted, QuotaAdjustedData
from shared.events.emission import Emission
from shared.events.ledger import QuotaChange
from shared.events.subjects import quota_subject


class QuotaChangeRefused(ValueError):
    """The change cannot be made (terms that make no sense); the message says why."""


class UnknownQuotaAccount(QuotaChangeRefused):
    """No account has that id."""


@dataclass(frozen=True, slots=True)
class QuotaChangeRequest:
    account_id: str
    change: QuotaChange
    reason: str
    delta_gpu_hours: float = 0.0
    valid_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class QuotaTermsNow:
    gpu_hours: float
    valid_from: datetime
    valid_to: datetime


def new_terms(current: QuotaTermsNow, request: QuotaChangeRequest) -> QuotaTermsNow:
    """The account's terms after the change (pure); `QuotaChangeRefused` names what is wrong."""
    gpu_hours = current.gpu_hours + request.delta_gpu_hours
    valid_to = request.valid_to or current.valid_to
    if gpu_hours <= 0:
        raise QuotaChangeRefused(f"the account would have {gpu_hours:g} GPU-hours; it must keep more than 0 "
                                 f"(it has {current.gpu_hours:g})")
    if valid_to <= current.valid_from:
        raise QuotaChangeRefused(f"valid_to {valid_to.isoformat()} is not after the account's start "
                                 f"{current.valid_from.isoformat()}")
    if request.change is QuotaChange.RENEW:
        if request.valid_to is None:
            raise QuotaChangeRefused("a renewal needs the new end of validity (valid_to)")
        if valid_to <= current.valid_to:
            raise QuotaChangeRefused(f"a renewal must end later than the account does now ({current.valid_to.isoformat()})")
        if request.delta_gpu_hours < 0:
            raise QuotaChangeRefused("a renewal may add GPU-hours, not remove them (use adjust)")
    elif request.delta_gpu_hours == 0 and request.valid_to is None:
        raise QuotaChangeRefused("an adjustment changes the GPU-hours (delta_gpu_hours) or the end (valid_to)")
    return QuotaTermsNow(gpu_hours, current.valid_from, valid_to)


async def change_quota(conn: asyncpg.Connection, emitter: Emitter, request: QuotaChangeRequest, now: datetime,
                       actor: str | None = None) -> Envelope:
    """Adjust or renew an account (the module docstring's steps, in the caller's transaction)."""
    await lock_usage(conn)
    row = await conn.fetchrow(
        f"SELECT project, gpu_hours, valid_from, valid_to FROM {SCHEMA}.quotas WHERE account_id = $1 FOR UPDATE",
        request.account_id,
    )
    if row is None:
        raise UnknownQuotaAccount(f"no quota account {request.account_id!r} (see `cardflow quota list`)")
    terms = new_terms(QuotaTermsNow(float(row["gpu_hours"]), row["valid_from"], row["valid_to"]), request)
    await conn.execute(
        f"UPDATE {SCHEMA}.quotas SET gpu_hours = $2, valid_to = $3 WHERE account_id = $1",
        request.account_id, Decimal(str(terms.gpu_hours)), terms.valid_to,
    )
    await recount_used(conn, request.account_id)  # a changed window counts differently
    (status,) = await load_quota_status(conn, account_id=request.account_id)
    data = QuotaAdjustedData(
        account_id=request.account_id, project=row["project"], delta_gpu_hours=request.delta_gpu_hours,
        valid_to=request.valid_to, reason=request.reason, change=request.change,
        used_gpu_hours=float(status.used_gpu_hours),
    )  # fmt: skip
    [event] = await emitter.emit(conn, [Emission(QuotaAdjusted, quota_subject(request.account_id), data, actor=actor)])
    await conn.execute(
        f"UPDATE {SCHEMA}.quotas SET changed_at = $2, changed_by = $3 WHERE account_id = $1",
        request.account_id, event.occurred_at, event.actor,
    )
    await record_quota_change(conn, event, QuotaChangeRow(request.change.value, request.delta_gpu_hours,
                                                          terms.gpu_hours, terms.valid_to))
    await _rearm_alerts(conn, request.account_id, now)
    return event


async def _rearm_alerts(conn: asyncpg.Connection, account_id: str, now: datetime) -> None:
    """Forget the raised alerts that are no longer true under the new terms (they may be raised again)."""
    (status,) = await load_quota_status(conn, account_id=account_id)
    still_due = {alert.key for alert in alerts_due(status, now, set())}
    raised = await conn.fetch(f"SELECT kind, threshold FROM {SCHEMA}.quota_alerts WHERE account_id = $1", account_id)
    for alert in raised:
        if (alert["kind"], alert["threshold"]) not in still_due:
            await conn.execute(f"DELETE FROM {SCHEMA}.quota_alerts WHERE account_id = $1 AND kind = $2 AND threshold = $3",
                               account_id, alert["kind"], alert["threshold"])


async def quota_history(conn: asyncpg.Connection | asyncpg.Pool, account_id: str) -> list[dict[str, Any]]:
    """Every change of an account, oldest first: what changed, the terms after it, who and why."""
    rows = await conn.fetch(
        f"SELECT revision, change, delta_gpu_hours, gpu_hours, valid_to, used_gpu_hours, reason, actor, changed_at,"
        f" event_id FROM {SCHEMA}.quota_changes WHERE account_id = $1 ORDER BY revision",
        account_id,
    )
    return [{key: _plain(value) for key, value in dict(row).items()} for row in rows]


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


