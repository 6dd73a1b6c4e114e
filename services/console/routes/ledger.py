"""Ledger endpoints: totals by project, card type or task; quota accounts; quota alerts for the banner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import AwareDatetime

from services.console.quota_banner import banner_alerts, days_left, quota_alerts
from services.console.routes.alerts import in_language
from services.console.routes.common import Lang, Pool, now_utc, unprocessable
from services.console.series import period_totals
from services.config.holder import DocumentHolder
from services.ledger.alerting import load_alerts
from services.ledger.reports import Grouping, ledger_rows, ledger_rows_between, quota_rows
from shared.cards import load_catalog
from shared.config import CARDS
from services.console.views import MISSING_TABLES, load_task_names

router = APIRouter(tags=["ledger"])
BANNER_ALERTS = 20
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NOT_STARTED = "the ledger is not available yet: the ledger service has not started"


@router.get("/ledger", summary="GPU-hours, cost and output, by project, card type or task")
async def get_ledger(
    pool: Pool, by: Grouping = Grouping.PROJECT,
    since: Annotated[AwareDatetime | None, Query(description="only usage and output from this time on (with a zone)")] = None,
    until: Annotated[AwareDatetime | None, Query(description="only usage and output before this time (with a zone)")] = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every row carries the catalog's `currency`; GPU-hours are real (wall-clock) hours the leases held GPUs."""
    if since is not None and until is not None and until <= since:
        raise unprocessable(("query", "until"), f"until ({until.isoformat()}) must be after since ({since.isoformat()})")
    try:
        if since is None and until is None:
            rows = await ledger_rows(pool, by)
        else:
            rows = await ledger_rows_between(pool, by, since or EPOCH, until or now_utc())
    except MISSING_TABLES:
        raise HTTPException(503, _NOT_STARTED) from None
    currency = await currency_in_force(pool)
    return [{**row, "currency": currency} for row in rows]


async def currency_in_force(pool: Pool) -> str:
    """The currency of the card catalog in force (the `cards` document; the packaged catalog's before it is seeded)."""
    holder = DocumentHolder(CARDS, lambda model, _version: model.currency, load_catalog().currency)
    await holder.refresh(pool)
    return holder.value


@router.get("/quotas", summary="Quota accounts: amount, used, left, validity and days left")
async def get_quotas(pool: Pool) -> list[dict[str, Any]]:
    now = now_utc()
    try:
        rows = await quota_rows(pool)
    except MISSING_TABLES:
        raise HTTPException(503, _NOT_STARTED) from None
    return [{**row, "days_left": round(days_left(row, now), 2)} for row in rows]


@router.get("/alerts", summary="The console banner: quota accounts expiring or running low, and the last day's alerts")
async def get_alerts(pool: Pool, lang: Lang = "en") -> list[dict[str, Any]]:
    """Quota accounts `expiring` within their alert lead or `low`, then the alerts of the last 24 hours
    meant for the console (`services.ledger.alerting`), newest first, with its `sentence`; each fact
    once (`banner_alerts`: one raised again carries `repeats`)."""
    now = now_utc()
    try:
        rows = await quota_rows(pool)
        recent = await load_alerts(pool, now - timedelta(days=1), console_only=True, limit=BANNER_ALERTS)
        names = await load_task_names(pool, {alert["task_id"] for alert in recent if alert["task_id"]})
        recent = await in_language(pool, recent, lang, task_names=names)
    except MISSING_TABLES:
        return []
    return banner_alerts(quota_alerts(rows, now), recent, task_names=names)



@router.get("/ledger/period", summary="Per project over the last N days: GPU-hours and cost used, output reported")
async def get_ledger_period(pool: Pool, days: Annotated[int, Query(ge=1, le=366)] = 7) -> dict[str, Any]:
    return await period_totals(pool, now_utc(), days)
