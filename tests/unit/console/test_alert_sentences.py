"""Alerts in Chinese: one sentence per alerting event, from its own fields (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.console.alert_sentences import alert_sentence_zh
from shared.alerts import AlertKind, alert_of
from shared.events import (
    QuotaExpiring,
    QuotaThresholdCrossed,
    TaskApprovalDelayed,
    TaskDeadlineEndangered,
    TaskFailed,
    TaskHeld,
    TaskQuotaEndangered,
    TaskRequeued,
    TaskSucceeded,
)
from shared.events.subjects import quota_subject, task_subject

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def on_task(kind: type, **data: object):
    return kind(subject=task_subject("T1"), subject_seq=1, producer="dispatcher/test", actor="system:dispatcher",
                occurred_at=AT, data={"task_id": "T1", **data})  # fmt: skip


def on_account(kind: type, **data: object):
    return kind(subject=quota_subject("acct"), subject_seq=1, producer="ledger/test", actor="system:ledger",
                occurred_at=AT, data={"account_id": "acct", "project": "vision", **data})  # fmt: skip


CASES = [
    (on_account(QuotaThresholdCrossed, threshold=0.8, used_gpu_hours=80.0, total_gpu_hours=100.0),
     "配额账户 acct（项目 vision）已用 80% 的 GPU 小时（80.0 / 100.0）"),
    (on_account(QuotaExpiring, valid_to=AT + timedelta(days=3), remaining_gpu_hours=12.5),
     "配额账户 acct（项目 vision）将于 2026-12-04 09:00 UTC 到期，剩余 12.5 GPU 小时"),
    (on_task(TaskHeld, reason="quota_expires", detail="runs 7 d but the quota expires in 2 d"),
     "任务 finetune-7b 已暂缓：配额即将到期"),
    (on_task(TaskHeld, reason="repeatedly_idle", detail="reclaimed 2 times"),
     "任务 finetune-7b 已暂缓：多次空闲被回收，等待人工检查（修复后放行，或取消）"),
    (on_task(TaskQuotaEndangered, account_id="acct", project="vision", valid_to=AT + timedelta(days=10),
             estimated_end=AT + timedelta(days=12), days_left=10.0, covered=False, detail="ends after expiry"),
     "核心任务 finetune-7b 预计 2026-12-13 09:00 UTC 结束，配额账户 acct 将于 2026-12-11 09:00 UTC 到期（还有 10.0 天），且剩余额度不够它用"),
    (on_task(TaskApprovalDelayed, waiting_since=AT - timedelta(hours=30), detail="has waited 30 h"),
     "任务 finetune-7b 自 2026-11-30 03:00 UTC 起等待审批，已超过时限"),
    (on_task(TaskDeadlineEndangered, deadline=AT + timedelta(hours=1), estimated_end=AT + timedelta(hours=3), detail="late"),
     "任务 finetune-7b 可能错过截止时间 2026-12-01 10:00 UTC（预计 2026-12-01 12:00 UTC 结束）"),
    (on_task(TaskRequeued, lease_id="L9", reason="reclaimed_idle", detail="idle"),
     "任务 finetune-7b 的 GPU 长时间空闲，租约 L9 已被回收，任务重新排队：空闲回收，重新排队"),
    (on_task(TaskFailed, lease_id="L9", error="CUDA out of memory", exit_code=1),
     "任务 finetune-7b 失败，不再重试：CUDA out of memory"),
    (on_task(TaskSucceeded, lease_id="L9", flags=["implausibly_early_success"], flag_detail="ran 20 s of 2 h"),
     "任务 finetune-7b 报告成功，但被标记待复核（成功过早（待复核）），其产出不计入账本"),
]  # fmt: skip


@pytest.mark.parametrize(("event", "sentence"), CASES, ids=lambda value: getattr(value, "type", ""))
def test_each_alerting_event_reads_in_chinese_naming_the_task(event, sentence: str) -> None:
    assert alert_of(event) is not None  # it is an alert in the first place
    assert alert_sentence_zh(event, "finetune-7b") == sentence


def test_every_alert_kind_has_a_chinese_sentence() -> None:
    kinds = {alert_of(event).kind for event, _ in CASES}  # type: ignore[union-attr]
    assert kinds == set(AlertKind)


def test_without_a_name_the_task_id_is_used() -> None:
    event = CASES[-2][0]
    assert alert_sentence_zh(event) == "任务 T1 失败，不再重试：CUDA out of memory"
