"""The daily digest's rules (pure): when one is due, the window it covers, what it says."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from pydantic import ValidationError

from shared.alert_digest import digest_body, digest_due, digest_window
from shared.config.governance import AlertDigest

SHANGHAI_9 = AlertDigest()  # 09:00 Asia/Shanghai = 01:00 UTC
UTC_18 = AlertDigest(at="18:30", timezone="UTC")
D14, D15 = date(2031, 3, 14), date(2031, 3, 15)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "digest", "last_day", "due", "why"),
    [
        (at("2031-03-15T00:59"), SHANGHAI_9, D14, None, "08:59 in Shanghai: not yet"),
        (at("2031-03-15T01:00"), SHANGHAI_9, D14, D15, "09:00 in Shanghai: today's is due"),
        (at("2031-03-15T01:00"), SHANGHAI_9, D15, None, "today's was sent already (a restart changes nothing)"),
        (at("2031-03-15T09:00"), SHANGHAI_9, None, D15, "never sent: the first one goes as soon as the time has passed"),
        (at("2031-03-15T07:00"), SHANGHAI_9, D14, D15, "down at 09:00, back at 15:00 the same day: sent late, once"),
        (at("2031-03-15T16:30"), SHANGHAI_9, D15, None, "00:30 on the 16th in Shanghai: before 09:00 again"),
        (at("2031-03-16T01:00"), SHANGHAI_9, D14, date(2031, 3, 16), "a day missed while down: only today's goes"),
        (at("2031-03-14T23:00"), SHANGHAI_9, D14, None, "23:00 UTC is 07:00 of the 15th in Shanghai: not yet"),
        (at("2031-03-15T15:59"), SHANGHAI_9, D14, D15, "23:59 of the 15th in Shanghai: still the 15th's digest"),
        (at("2031-03-15T18:29"), UTC_18, D14, None, "UTC 18:29: not yet"),
        (at("2031-03-15T18:30"), UTC_18, D14, D15, "UTC 18:30: due"),
        (at("2031-03-15T18:30"), AlertDigest(enabled=False), None, None, "digest off"),
    ],
)
def test_a_digest_is_due_once_a_day_after_its_local_time(now: datetime, digest: AlertDigest, last_day: date | None,
                                                         due: date | None, why: str) -> None:  # fmt: skip
    assert digest_due(now, digest, last_day) == due, why


def test_the_digest_covers_the_24_hours_before_it_and_says_what_each_alert_is() -> None:
    now = at("2031-03-15T01:00")
    since, until = digest_window(now)
    assert (since, until) == (now - timedelta(hours=24), now)
    alerts = [{"alert_id": "e1", "kind": "idle_reclaim", "sentence": "task T lost lease L", "occurred_at": at("2031-03-14T20:00"),
               "event_type": "task.requeued", "task_id": "T", "account_id": None, "project": "research", "deliveries": []},
              {"alert_id": "e2", "kind": "quota_expiring", "sentence": "quota account a expires", "occurred_at": "2031-03-14T21:00:00+00:00",
               "event_type": "quota.expiring", "task_id": None, "account_id": "a", "project": "vision"}]  # fmt: skip
    body = digest_body(D15, SHANGHAI_9, since, until, alerts)
    assert body["kind"] == "digest" and body["day"] == "2031-03-15" and body["timezone"] == "Asia/Shanghai"
    assert body["total"] == 2 and body["counts"] == {"idle_reclaim": 1, "quota_expiring": 1}
    assert body["alerts"][0]["occurred_at"] == "2031-03-14T20:00:00+00:00" and "deliveries" not in body["alerts"][0]
    assert body["since"] == "2031-03-14T01:00:00+00:00"


@pytest.mark.parametrize(("field", "value"), [("at", "9:00"), ("at", "24:00"), ("timezone", "Mars/Olympus")])
def test_a_bad_time_or_zone_is_refused_naming_the_field(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        AlertDigest(**{field: value})
    assert field in str(caught.value)
