"""The alert digest: every alert since a moment, with where each went (any token).

    GET /v1/alerts/digest?since=2026-12-01T00:00:00Z&lang=zh     (default: the last 24 hours, English)

Each alert (`services.ledger.alerting.load_alerts`): `alert_id` (its source event), `kind`,
`sentence`, `occurred_at`, `event_type`, `task_id`, `account_id`, `project`, and `deliveries` to
webhooks (`url`, `status` pending / delivered / dead, `attempts`, `last_error`, `delivered_at`).
The console banner (`GET /v1/alerts`, routes/ledger.py) shows the last day's alerts for a console sink.
`daily` is the pushed daily digest: its time and zone from the policy in force (`alerts.digest`)
and the `last` one sent (day, `sent_at`, `alerts`, its webhook `deliveries`; null before the first).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, HTTPException, Query, Request

from services.audit.reading import SCHEMA as AUDIT
from services.console.alert_sentences import alert_sentence_zh
from services.console.routes.common import Lang, Pool, now_utc, unprocessable
from services.console.views import MISSING_TABLES, load_task_names
from services.console.routes.approvals import policy_document
from services.ledger.alerting import load_alerts, load_last_digest
from shared.events import parse_event

router = APIRouter(tags=["alerts"])
DIGEST_DAY = timedelta(days=1)


@router.get("/alerts/digest", summary="Every alert since a moment (default: a day ago), with its webhook deliveries")
async def get_digest(request: Request, pool: Pool,
                     since: Annotated[datetime | None, Query(description="ISO date-time with a zone")] = None,
                     limit: Annotated[int, Query(ge=1, le=10_000)] = 1000, lang: Lang = "en") -> dict[str, Any]:  # fmt: skip
    start = since or now_utc() - DIGEST_DAY
    if start.tzinfo is None:
        raise unprocessable(("query", "since"), "give a time zone, e.g. 2026-12-01T00:00:00Z")
    try:
        alerts = await load_alerts(pool, start, limit=limit)
        alerts = await in_language(pool, alerts, lang)
        last = await load_last_digest(pool)
    except MISSING_TABLES:
        raise HTTPException(503, "alerts are not available yet: the ledger service has not started") from None
    counts: dict[str, int] = {}
    for alert in alerts:
        counts[alert["kind"]] = counts.get(alert["kind"], 0) + 1
    daily = (await policy_document(request)).alerts.digest
    return {"since": start.isoformat(), "total": len(alerts), "counts": counts, "alerts": alerts,
            "daily": {"enabled": daily.enabled, "at": daily.at, "timezone": daily.timezone, "last": last}}


async def in_language(pool: asyncpg.Pool, alerts: list[dict[str, Any]], lang: str, *,
                      task_names: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The alerts with their sentences in `lang`: for Chinese, rendered from each alert's source event
    (read from the audit archive by its id) naming tasks by `task_names` (loaded from the views when
    not given); an alert whose event is not archived yet keeps English."""
    if lang != "zh" or not alerts:
        return alerts
    rows = await pool.fetch(f"SELECT event_id, body FROM {AUDIT}.events WHERE event_id = ANY($1::text[])",
                            [alert["alert_id"] for alert in alerts])  # fmt: skip
    events = {row["event_id"]: parse_event(row["body"]) for row in rows}
    names = task_names if task_names is not None else await load_task_names(
        pool, {alert["task_id"] for alert in alerts if alert["task_id"]})
    shown = []
    for alert in alerts:
        event = events.get(alert["alert_id"])
        sentence = alert_sentence_zh(event, names.get(alert["task_id"] or "")) if event is not None else None
        shown.append({**alert, "sentence": sentence or alert["sentence"]})
    return shown
