"""Alerts in Chinese (pure): the sentence of an alert rendered from the event it came from.

    sentence = alert_sentence_zh(event, task_name)   # None: keep the stored English sentence

The ledger stores each alert with an English sentence (`shared.alerts`); the console and the
digest show it in the reader's language. A Chinese sentence is built from the source event's
fields (its id is the alert's id; the console reads it from the audit archive), naming the task by
its name and the reasons by their Chinese labels. Free text that comes from elsewhere — a task's
error output, a reviewer's words — is quoted as it was written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.console.labels import REASON_LABELS_ZH
from shared.events import (
    Envelope,
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


def alert_sentence_zh(event: Envelope, task_name: str | None = None) -> str | None:
    """The alert `event` raised, in Chinese; None for an event this module has no template for."""
    render = _RENDERERS.get(type(event))
    if render is None:
        return None
    task = task_name or getattr(event.data, "task_id", "")
    return render(event.data, task)


def _reason(value: str) -> str:
    return REASON_LABELS_ZH.get(value, value)


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment is not None else "未知"


def _threshold(d: Any, _: str) -> str:
    return (f"配额账户 {d.account_id}（项目 {d.project}）已用 {d.threshold:.0%} 的 GPU 小时"
            f"（{d.used_gpu_hours:.1f} / {d.total_gpu_hours:.1f}）")  # fmt: skip


def _expiring(d: Any, _: str) -> str:
    return f"配额账户 {d.account_id}（项目 {d.project}）将于 {_when(d.valid_to)} 到期，剩余 {d.remaining_gpu_hours:.1f} GPU 小时"


def _held(d: Any, task: str) -> str:
    then = "，等待人工检查（修复后放行，或取消）" if d.reason.value == "repeatedly_idle" else ""
    return f"任务 {task} 已暂缓：{_reason(d.reason.value)}{then}"


def _quota_at_risk(d: Any, task: str) -> str:
    cover = "" if d.covered else "，且剩余额度不够它用"
    return (f"核心任务 {task} 预计 {_when(d.estimated_end)} 结束，配额账户 {d.account_id} 将于 {_when(d.valid_to)}"
            f" 到期（还有 {d.days_left:.1f} 天）{cover}")  # fmt: skip


def _approval_waiting(d: Any, task: str) -> str:
    return f"任务 {task} 自 {_when(d.waiting_since)} 起等待审批，已超过时限"


def _deadline(d: Any, task: str) -> str:
    return f"任务 {task} 可能错过截止时间 {_when(d.deadline)}（预计 {_when(d.estimated_end)} 结束）"


def _requeued(d: Any, task: str) -> str:
    return f"任务 {task} 的 GPU 长时间空闲，租约 {d.lease_id} 已被回收，任务重新排队：{_reason(d.reason.value)}"


def _failed(d: Any, task: str) -> str:
    return f"任务 {task} 失败，不再重试：{d.error}"


def _flagged(d: Any, task: str) -> str:
    flags = "、".join(_reason(flag.value) for flag in d.flags)
    return f"任务 {task} 报告成功，但被标记待复核（{flags}），其产出不计入账本"


_RENDERERS: dict[type[Envelope], Callable[[Any, str], str]] = {
    QuotaThresholdCrossed: _threshold, QuotaExpiring: _expiring, TaskHeld: _held, TaskQuotaEndangered: _quota_at_risk,
    TaskApprovalDelayed: _approval_waiting, TaskDeadlineEndangered: _deadline, TaskRequeued: _requeued,
    TaskFailed: _failed, TaskSucceeded: _flagged,
}  # fmt: skip
