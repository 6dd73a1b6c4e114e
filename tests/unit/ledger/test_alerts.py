"""Which events become alerts (`shared.alerts.alert_of`), and the webhook back-off (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.cli.alerts import since_moment
from services.ledger.alerting import next_attempt
from shared.alerts import AlertKind, alert_of
from shared.events import make_event
from shared.events.dispatch import (
    TaskDeadlineEndangered,
    TaskFailed,
    TaskHeld,
    TaskQueued,
    TaskRequeued,
    TaskSucceeded,
)
from shared.events.ledger import QuotaExpiring, QuotaThresholdCrossed

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def event(cls, data):  # noqa: ANN001, ANN201
    return make_event(cls, subject="x/1", subject_seq=1, producer="p/1", actor="service:p", data=data)


@pytest.mark.parametrize(("made", "kind", "words"), [
    (event(QuotaThresholdCrossed, {"account_id": "a1", "project": "p", "threshold": 0.8, "used_gpu_hours": 8.0,
                                   "total_gpu_hours": 10.0}), AlertKind.QUOTA_THRESHOLD, "has used 80% of its GPU-hours"),
    (event(QuotaExpiring, {"account_id": "a1", "project": "p", "valid_to": NOW, "remaining_gpu_hours": 3.0}),
     AlertKind.QUOTA_EXPIRING, "expires 2026-01-01T00:00+00:00 with 3.0 GPU-hours left"),
    (event(TaskHeld, {"task_id": "T1", "reason": "quota_expires", "detail": "the quota of project p has expired"}),
     AlertKind.QUOTA_HOLD, "task T1 is held (quota_expires)"),
    (event(TaskHeld, {"task_id": "T1", "reason": "repeatedly_idle", "detail": "reclaimed 2 times"}),
     AlertKind.IDLE_RECLAIM, "reclaimed 2 times"),
    (event(TaskRequeued, {"task_id": "T1", "lease_id": "L1", "reason": "reclaimed_idle", "detail": "idle"}),
     AlertKind.IDLE_RECLAIM, "lost lease L1"),
    (event(TaskDeadlineEndangered, {"task_id": "T1", "deadline": NOW, "detail": "late"}), AlertKind.DEADLINE_AT_RISK,
     "may miss its deadline: late"),
    (event(TaskFailed, {"task_id": "T1", "error": "boom"}), AlertKind.TASK_FAILED, "task T1 failed: boom"),
    (event(TaskSucceeded, {"task_id": "T1", "lease_id": "L1", "flags": ["implausibly_early_success"],
                           "flag_detail": "after 20s"}),
     AlertKind.FLAGGED_SUCCESS, "task T1 succeeded but is flagged for review (implausibly_early_success): after 20s"),
])
def test_alerting_events(made, kind: AlertKind, words: str) -> None:  # noqa: ANN001
    alert = alert_of(made)
    assert alert is not None and alert.kind is kind and words in alert.sentence
    assert alert.alert_id == made.event_id


@pytest.mark.parametrize("made", [
    event(TaskHeld, {"task_id": "T1", "reason": "not_approved", "detail": "waits"}),  # the delay alert says it
    event(TaskRequeued, {"task_id": "T1", "lease_id": "L1", "reason": "preempted"}),
    event(TaskQueued, {"task_id": "T1", "project": "p", "priority_class": "core", "priority": 0}),
    event(TaskSucceeded, {"task_id": "T1", "lease_id": "L1", "output_units": 12.0}),  # believed: no alert
])
def test_events_that_are_not_alerts(made) -> None:  # noqa: ANN001
    assert alert_of(made) is None


def test_webhook_retries_back_off_doubling() -> None:
    assert [(next_attempt(n, 2.0, NOW) - NOW).total_seconds() for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]


def test_since_takes_relative_or_absolute_moments() -> None:
    assert since_moment("24h", NOW) == NOW - timedelta(hours=24)
    assert since_moment("7d", NOW) == NOW - timedelta(days=7)
    assert since_moment("2025-12-31T08:00", NOW) == datetime(2025, 12, 31, 8, tzinfo=UTC)


def test_the_daily_digest_line_says_when_and_what_was_last_sent_in_both_languages() -> None:
    from services.cli.alerts import daily_line, digest_table
    from services.cli.lang import CliLang

    last = {"day": "2031-03-15", "timezone": "Asia/Shanghai", "sent_at": "2031-03-15T01:05:00+00:00", "alerts": 3,
            "deliveries": [{"url": "http://hook/x", "status": "delivered", "attempts": 2, "last_error": None}]}
    daily = {"enabled": True, "at": "09:00", "timezone": "Asia/Shanghai", "last": last}
    assert daily_line(daily) == ("daily digest: pushed at 09:00 Asia/Shanghai to the webhook and log sinks; "
                                 "last: 2031-03-15 (sent 2031-03-15 01:05 UTC, 3 alerts) → ✓ http://hook/x")
    assert daily_line(daily, CliLang.ZH) == ("每日摘要：每天 09:00（Asia/Shanghai）推送到 webhook 和日志；最近一次：2031-03-15"
                                             "（2031-03-15 01:05 UTC 发送，3 条告警）→ ✓ http://hook/x")
    assert daily_line({**daily, "last": None}).endswith("none sent yet")
    assert daily_line({**daily, "enabled": False}, CliLang.ZH).startswith("每日摘要：已关闭")
    table = digest_table({"since": "2031-03-14T01:05:00+00:00", "total": 0, "counts": {}, "alerts": []}, CliLang.ZH)
    assert table.title == "自 2031-03-14T01:05 以来的告警：0 条（无）"
    assert [column.header for column in table.columns] == ["时间", "类型", "对象", "内容", "Webhook 投递"]
