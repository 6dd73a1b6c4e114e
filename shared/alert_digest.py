"""The daily alert digest: when one is due, what window it covers, what it says (pure).

    day = digest_due(now, policy.alerts.digest, last_day)   # the local day to send for, or None
    since, until = digest_window(now)                        # the 24 hours before now
    body = digest_body(day, digest, since, until, alerts)    # the JSON a webhook sink receives

A digest is due once the policy's time of day (`alerts.digest.at`, local time in
`alerts.digest.timezone`) has passed on a local day no digest was sent for yet. So it goes at most
once a day; a ledger that was down at the time sends it when it is back (the same day); a day it
was down throughout gets none (the next digest covers the last 24 hours anyway). The caller keeps
the days sent in PostgreSQL (`ledger.alert_digests`), so a restart never sends a day twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from shared.config.governance import AlertDigest

DIGEST_SPAN = timedelta(hours=24)


def digest_due(now: datetime, digest: AlertDigest, last_day: date | None) -> date | None:
    """The local day whose digest is due at `now` (aware), or None (off, not time yet, or already sent)."""
    if not digest.enabled:
        return None
    local = now.astimezone(ZoneInfo(digest.timezone))
    if local.time() < digest.time_of_day:
        return None
    if last_day is not None and last_day >= local.date():
        return None
    return local.date()


def digest_window(now: datetime) -> tuple[datetime, datetime]:
    """The alerts a digest sent at `now` covers: raised in [now - 24 h, now)."""
    return now - DIGEST_SPAN, now


def digest_counts(alerts: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Alerts per kind."""
    return dict(sorted(Counter(str(alert["kind"]) for alert in alerts).items()))


def digest_body(day: date, digest: AlertDigest, since: datetime, until: datetime,
                alerts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """The digest as a webhook receives it (JSON): the day, the window, counts per kind, and each alert."""
    fields = ("alert_id", "kind", "sentence", "occurred_at", "event_type", "task_id", "account_id", "project")
    return {
        "source": "cardflow", "kind": "digest", "day": day.isoformat(), "timezone": digest.timezone,
        "since": since.isoformat(), "until": until.isoformat(), "total": len(alerts), "counts": digest_counts(alerts),
        "alerts": [{key: _plain(alert.get(key)) for key in fields} for alert in alerts],
    }  # fmt: skip


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
