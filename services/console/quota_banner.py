"""The banner on every console page (pure): quota accounts expiring soon or running low, then the
last day's alerts, each fact once.

    alerts = quota_alerts(rows, now)           # rows: `services.ledger.reports.quota_rows`
    shown = banner_alerts(alerts, recent)      # recent: `services.ledger.alerting.load_alerts`, newest first

An account is `expiring` when it is in force and ends within its alert lead (default 15 days), and
`low` when it has used at least its highest alert threshold (as raised by the ledger) or has
nothing left. Expired accounts are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared.alerts import AlertKind

DEFAULT_LEAD_DAYS = 15.0


class QuotaBannerKind(StrEnum):
    """Why an account is on the banner (computed from its row at each page view)."""

    EXPIRING = "expiring"  # ends within its alert lead
    LOW = "low"  # crossed its highest raised threshold, or used up


def days_left(row: Mapping[str, Any], now: datetime) -> float:
    """Days until the account's `valid_to` (negative once expired)."""
    return (datetime.fromisoformat(row["valid_to"]) - now).total_seconds() / 86400


def quota_alerts(rows: Iterable[Mapping[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """One alert per account and kind, soonest expiry first."""
    alerts = []
    for row in rows:
        left = days_left(row, now)
        if left <= 0 or datetime.fromisoformat(row["valid_from"]) > now:
            continue
        lead = row.get("alert_lead_days")
        if left <= (DEFAULT_LEAD_DAYS if lead is None else lead):
            alerts.append(_alert(QuotaBannerKind.EXPIRING, row, left))
        thresholds = [t for t in row.get("alerts_raised", []) if t != "expiring"]
        if thresholds or row["remaining_gpu_hours"] <= 0:
            alerts.append(_alert(QuotaBannerKind.LOW, row, left))
    return sorted(alerts, key=lambda a: (a["days_left"], a["account_id"], a["kind"]))


def _alert(kind: QuotaBannerKind, row: Mapping[str, Any], left: float) -> dict[str, Any]:
    return {
        "kind": kind.value, "account_id": row["account_id"], "project": row["project"], "card_type": row["card_type"],
        "days_left": round(left, 2), "used_share": row["used_share"], "remaining_gpu_hours": row["remaining_gpu_hours"],
        "valid_to": row["valid_to"],
    }  # fmt: skip


ACCOUNT_ALERT_KINDS = frozenset({AlertKind.QUOTA_EXPIRING, AlertKind.QUOTA_THRESHOLD})
"""Recent alerts about an account that its own banner line (with a live countdown) already says."""


def banner_alerts(quota: list[dict[str, Any]], recent: Iterable[Mapping[str, Any]], *,
                  task_names: Mapping[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The quota lines, then the recent alerts (newest first) with each fact once: an alert about an
    account already on the banner is left out, and one raised again (same kind, subject and
    sentence, e.g. a task held anew each cycle it stays held) shows once with `repeats`. An alert
    about a task carries its `task_name` when known (else the id)."""
    names = task_names or {}
    on_banner = {alert["account_id"] for alert in quota}
    shown: dict[tuple[Any, ...], dict[str, Any]] = {}
    for alert in recent:
        if alert["kind"] in ACCOUNT_ALERT_KINDS and alert.get("account_id") in on_banner:
            continue
        key = (alert["kind"], alert.get("task_id"), alert.get("account_id"), alert.get("sentence"))
        if key in shown:
            shown[key]["repeats"] += 1
        else:
            task_id = alert.get("task_id")
            shown[key] = {**alert, "repeats": 1, "task_name": names.get(task_id, task_id) if task_id else None}
    return quota + list(shown.values())
