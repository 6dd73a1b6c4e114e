"""Quota accounts after their grant: adjust GPU-hours, renew validity (operator), and an account's history.

    POST /v1/quotas/{account_id}/adjust   {"delta_gpu_hours", "valid_to"?, "reason"}
    POST /v1/quotas/{account_id}/renew    {"valid_to", "add_gpu_hours"?, "reason"}
    GET  /v1/quotas/{account_id}/history  every change: what, the terms after it, who and why

The ledger's own command (`services.ledger.quota_changes.change_quota`) runs here with a ledger
`Emitter` whose actor is the caller: the account row, its history line and `quota.adjusted` (with
the reason and what the account counted under its new terms) commit together. 404 an unknown
account, 422 terms that make no sense (the sentence says which).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from services.common.runtime import Emitter
from services.console.auth import requires
from services.console.routes.common import Pool, now_utc, unprocessable
from services.console.views import MISSING_TABLES
from services.ledger.quota_changes import (
    QuotaChangeRefused,
    QuotaChangeRequest,
    UnknownQuotaAccount,
    change_quota,
    quota_history,
)
from services.ledger.quotas import SCHEMA as LEDGER_SCHEMA
from shared.events.ledger import QuotaChange
from shared.events.values import Detail
from shared.identity import Principal, Role

router = APIRouter(tags=["ledger"])
Operator = Annotated[Principal, requires(Role.OPERATOR)]
AccountId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$", description="a quota account id")]
Reason = Annotated[Detail, Field(min_length=1, description="why; recorded in the account's history and the event")]


class AdjustBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    delta_gpu_hours: float = Field(0.0, ge=-1e9, le=1e9, description="GPU-hours to add (negative: to remove)")
    valid_to: AwareDatetime | None = Field(None, description="a new end of validity (earlier or later)")
    reason: Reason


class RenewBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    valid_to: AwareDatetime = Field(description="the new end of validity, later than the current one")
    add_gpu_hours: float = Field(0.0, ge=0, le=1e9, description="GPU-hours added for the new period")
    reason: Reason


class QuotaChanged(BaseModel):
    account_id: str
    change: QuotaChange
    gpu_hours: float
    valid_to: datetime
    used_gpu_hours: float
    changed_by: str
    event_id: str


@router.post("/quotas/{account_id}/adjust", response_model=QuotaChanged,
             summary="Add or remove GPU-hours of a quota account, or move its end (operator)")  # fmt: skip
async def post_adjust(account_id: AccountId, body: AdjustBody, request: Request, operator: Operator) -> QuotaChanged:
    change = QuotaChangeRequest(account_id, QuotaChange.ADJUST, body.reason, body.delta_gpu_hours, _utc(body.valid_to))
    return await _change(request, operator, change)


@router.post("/quotas/{account_id}/renew", response_model=QuotaChanged,
             summary="Extend a quota account's validity, optionally adding GPU-hours (operator)")  # fmt: skip
async def post_renew(account_id: AccountId, body: RenewBody, request: Request, operator: Operator) -> QuotaChanged:
    change = QuotaChangeRequest(account_id, QuotaChange.RENEW, body.reason, body.add_gpu_hours, _utc(body.valid_to))
    return await _change(request, operator, change)


@router.get("/quotas/{account_id}/history", summary="Every change of a quota account: what, who and why")
async def get_history(account_id: AccountId, pool: Pool) -> list[dict[str, Any]]:
    try:
        changes = await quota_history(pool, account_id)
    except MISSING_TABLES:
        raise HTTPException(503, "the ledger is not available yet: the ledger service has not started") from None
    if not changes:
        raise HTTPException(404, f"no quota account {account_id!r} (see `cardflow quota list`)")
    return changes


async def _change(request: Request, operator: Principal, change: QuotaChangeRequest) -> QuotaChanged:
    emitter = Emitter(LEDGER_SCHEMA, request.app.state.producer, operator.actor)
    try:
        async with request.app.state.pool.acquire() as conn, conn.transaction():
            event = await change_quota(conn, emitter, change, now_utc())
            row = await conn.fetchrow(f"SELECT gpu_hours, valid_to FROM {LEDGER_SCHEMA}.quotas WHERE account_id = $1",
                                      change.account_id)
    except QuotaChangeRefused as refused:
        message = f"quota not changed: {refused}"
        raise HTTPException(404, message) if isinstance(refused, UnknownQuotaAccount) else unprocessable(("body",), message) from None
    return QuotaChanged(account_id=change.account_id, change=change.change, gpu_hours=float(row["gpu_hours"]),
                        valid_to=row["valid_to"], used_gpu_hours=event.data.used_gpu_hours or 0.0,
                        changed_by=event.actor, event_id=event.event_id)  # fmt: skip


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.astimezone(UTC)
