"""Quota alerts for the banner on every console page (pure): accounts expiring soon or running low.

    alerts = quota_alerts(rows, now)   # rows: `services.ledger.reports.quota_rows`

An account is `expiring` when it is in force and ends within its alert lead (default 15 days), and
`low` when it has used at least its highest alert threshold (as raised by the ledger) or has
nothing left. Expired accounts are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

DEFAULT_LEAD_DAYS = 15.0


class AlertKind(StrEnum):
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
            alerts.append(_alert(AlertKind.EXPIRING, row, left))
        thresholds = [t for t in row.get("alerts_raised", []) if t != "expiring"]
        if thresholds or row["remaining_gpu_hours"] <= 0:
            alerts.append(_alert(AlertKind.LOW, row, left))
    return sorted(alerts, key=lambda a: (a["days_left"], a["account_id"], a["kind"]))


def _alert(kind: AlertKind, row: Mapping[str, Any], left: float) -> dict[str, Any]:
    return {
        "kind": kind.value, "account_id": row["account_id"], "project": row["project"], "card_type": row["card_type"],
        "days_left": round(left, 2), "used_share": row["used_share"], "remaining_gpu_hours": row["remaining_gpu_hours"],
        "valid_to": row["valid_to"],
    }  # fmt: skip
