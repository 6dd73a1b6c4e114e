"""Ledger endpoints: totals by project, card type or task; quota accounts; quota alerts for the banner."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from services.console.quota_banner import days_left, quota_alerts
from services.console.routes.common import Pool, now_utc
from services.console.series import period_totals
from services.ledger.alerting import load_alerts
from services.ledger.reports import Grouping, ledger_rows, quota_rows
from services.console.views import MISSING_TABLES

router = APIRouter(tags=["ledger"])
BANNER_ALERTS = 20
_NOT_STARTED = "the ledger is not available yet: the ledger service has not started"


@router.get("/ledger", summary="GPU-hours, cost and output, by project, card type or task")
async def get_ledger(pool: Pool, by: Grouping = Grouping.PROJECT) -> list[dict[str, Any]]:
    try:
        return await ledger_rows(pool, by)
    except MISSING_TABLES:
        raise HTTPException(503, _NOT_STARTED) from None


@router.get("/quotas", summary="Quota accounts: amount, used, left, validity and days left")
async def get_quotas(pool: Pool) -> list[dict[str, Any]]:
    now = now_utc()
    try:
        rows = await quota_rows(pool)
    except MISSING_TABLES:
        raise HTTPException(503, _NOT_STARTED) from None
    return [{**row, "days_left": round(days_left(row, now), 2)} for row in rows]


@router.get("/alerts", summary="The console banner: quota accounts expiring or running low, and the last day's alerts")
async def get_alerts(pool: Pool) -> list[dict[str, Any]]:
    """Quota accounts `expiring` within their alert lead or `low` (as before), then every alert of the
    last 24 hours meant for the console (`services.ledger.alerting`), newest first, with its `sentence`."""
    now = now_utc()
    try:
        rows = await quota_rows(pool)
        recent = await load_alerts(pool, now - timedelta(days=1), console_only=True, limit=BANNER_ALERTS)
    except MISSING_TABLES:
        return []
    return quota_alerts(rows, now) + recent


@router.get("/ledger/period", summary="Per project over the last N days: GPU-hours and cost used, output reported")
async def get_ledger_period(pool: Pool, days: Annotated[int, Query(ge=1, le=366)] = 7) -> dict[str, Any]:
    return await period_totals(pool, now_utc(), days)
