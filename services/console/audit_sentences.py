"""The audit trail's steps in Chinese (pure): one sentence per event type the story tells, rendered
from the archived event's structured fields, never translated from the English sentence.

    sentence, original_needed = step_sentence_zh(step.event, step.run)

`services.audit.story` tells each step in English and keeps the event it told (`StoryStep.event`).
Here the same step is told in Chinese; where the event carries words only a person or a service
wrote in English (a cancel reason, a rejection's problems, an error, a deferral's detail),
`original_needed` says so and the reader sees the English sentence beside it as 原文. A unit test
checks that every event type the story tells has a Chinese teller here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from services.audit.story import StoryStep
from services.console.labels import GPU_STATUS_LABELS, REASON_LABELS_ZH, STATE_LABELS, Language, profile_label
from services.console.labels_events import event_type_label
from shared.events import (
    DataReadySignalled, Envelope, LeaseExpired, LeaseGranted, LeaseReleased, LeaseRevoked, TaskApproved, TaskCancelled,
    TaskCancelRequested, TaskCheckpointed, TaskFailed, TaskFlagCleared, TaskHeld, TaskMatched, TaskQueued,
    TaskReadinessChanged, TaskRejected, TaskRequeued, TaskStarted, TaskSubmitted, TaskSucceeded, TaskUnmatchable,
    UsageRecorded,
)  # fmt: skip
from shared.events.reasons import ReleaseReason, RevokeReason
from shared.task_view import output_units_text

MAX_INPUTS_SHOWN = 5
Said = tuple[str, bool]
"""A step in Chinese, and whether the English sentence says more (shown beside as 原文)."""

LEASE_END_ZH: Mapping[str, str] = {
    RevokeReason.PREEMPTED: "被抢占", RevokeReason.RECLAIMED_IDLE: "空闲回收", RevokeReason.CANCELLED: "任务取消",
    RevokeReason.NODE_LOST: "节点失联", RevokeReason.SUPERSEDED: "被新租约取代", RevokeReason.OPERATOR: "运维人员操作",
    ReleaseReason.SUCCEEDED: "运行成功", ReleaseReason.FAILED: "运行失败", ReleaseReason.EXPIRED: "租约过期",
    ReleaseReason.REVOKED: "租约被收回",
}  # fmt: skip
"""Why a lease ended (`RevokeReason`, `ReleaseReason` values; the values both share mean the same)."""

PRIORITY_CLASS_ZH: Mapping[str, str] = GPU_STATUS_LABELS["zh"]  # its class names: 核心 / 标准 / 机会型


def _submitted(e: TaskSubmitted, run: int | None) -> Said:
    s = e.data.submission
    via = f"（来自模板 {s.template}）" if s.template else ""
    vram = f"，每卡显存至少 {s.min_vram_gb:g} GB" if s.min_vram_gb else ""
    scenario = f"，场景 {s.labels['scenario']}" if "scenario" in s.labels else ""
    return (f"已提交{via}：{s.name!r}，项目 {s.project}{scenario}，{PRIORITY_CLASS_ZH.get(s.priority_class.value, s.priority_class.value)}"
            f"类别，优先级 {s.priority}，{s.gpus} 张 GPU{vram}，负载类型 {profile_label(s.profile, 'zh')}，预估 {s.estimate_gpu_hours:g} GPU 小时，"
            f"{len(s.inputs)} 个输入", False)  # fmt: skip


def _rejected(e: TaskRejected, run: int | None) -> Said:
    return f"提交被拒绝，问题字段：{'、'.join(r.field for r in e.data.reasons)}", True


def _cancel_requested(e: TaskCancelRequested, run: int | None) -> Said:
    return f"{e.actor} 请求取消", bool(e.data.reason)


def _flag_cleared(e: TaskFlagCleared, run: int | None) -> Said:
    return f"{e.actor} 检查产出后清除了复核标记，产出计入统计", True


def _readiness(e: TaskReadinessChanged, run: int | None) -> Said:
    d = e.data
    if d.ready:
        return "所有输入均已就绪", False
    shown = "、".join(str(ref) for ref in d.missing_inputs[:MAX_INPUTS_SHOWN])
    more = f" 等 {len(d.missing_inputs)} 个" if len(d.missing_inputs) > MAX_INPUTS_SHOWN else ""
    return f"等待数据：缺 {len(d.missing_inputs)} 个输入（已就绪 {d.ready_fraction:.0%}）：{shown}{more}", False


def _data_ready(e: DataReadySignalled, run: int | None) -> Said:
    d = e.data
    where = f"，位于 {d.location}" if d.location else ""
    source = f"（{d.source}）" if d.source else ""
    return f"{e.actor} 通知输入 {d.input} 已就绪{where}{source}", False


def _matched(e: TaskMatched, run: int | None) -> Said:
    """The choice's own sentence (the English `reason`) is added by the caller from the matcher's numbers."""
    d = e.data
    chosen = next(o for o in d.ranking if o.card_type == d.chosen)
    others = "；".join(f"{o.card_type} {_hours(o.est_runtime_s)} {o.est_cost:.2f}" for o in d.ranking if o.card_type != d.chosen)
    catalog = f"，卡型目录版本 {d.catalog_version}" if d.catalog_version else ""
    oversized = "（选大了）" if d.oversized else ""
    return (f"匹配到 {d.chosen}{oversized}：预计 {_hours(chosen.est_runtime_s)}，成本 {chosen.est_cost:.2f}；"
            f"备选：{others or '无'}{catalog}", bool(d.reason))  # fmt: skip


def _unmatchable(e: TaskUnmatchable, run: int | None) -> Said:
    return f"没有可用卡型：{_reason(e.data.reason)}", bool(e.data.detail)


def _queued(e: TaskQueued, run: int | None) -> Said:
    d = e.data
    return f"进入 GPU 队列（{PRIORITY_CLASS_ZH.get(d.priority_class.value, d.priority_class.value)}，优先级 {d.priority}）", False


def _held(e: TaskHeld, run: int | None) -> Said:
    return f"暂缓：{_reason(e.data.reason)}", bool(e.data.detail)


def _approved(e: TaskApproved, run: int | None) -> Said:
    return f"{e.actor} 已批准", bool(e.data.note)


def _granted(e: LeaseGranted, run: int | None) -> Said:
    d = e.data
    resume = f"，从检查点 {d.resume_from} 继续" if d.resume_from else "，从头开始"
    version = f"，策略版本 {d.policy_version}" if d.policy_version else ""
    clock = f"，模拟节点（墙钟的 {d.time_scale:g} 倍）" if d.time_scale != 1.0 else ""
    filler = "，作为突发余量的填充任务（核心任务到来时立即让出）" if d.borrowed_headroom else ""
    return (f"第 {run} 次运行：已分配节点 {d.node_id}（{d.card_type}）的 GPU {','.join(map(str, d.gpu_indices))}，"
            f"租约 {d.lease_id}，隔离令牌 {d.fencing_token}{resume}{version}{clock}{filler}", False)  # fmt: skip


def _started(e: TaskStarted, run: int | None) -> Said:
    resumed = f"，从检查点 {e.data.resumed_from} 继续" if e.data.resumed_from else ""
    return f"在节点 {e.data.node_id} 上开始运行{resumed}", False


def _checkpointed(e: TaskCheckpointed, run: int | None) -> Said:
    d = e.data
    progress = f"，进度 {d.progress:.0%}" if d.progress is not None else ""
    output = f"，已产出 {output_units_text(d.output_units)} 单位" if d.output_units is not None else ""
    return f"保存检查点 {d.checkpoint_uri}{progress}{output}", False


def _revoked(e: LeaseRevoked, run: int | None) -> Said:
    d = e.data
    return f"租约 {d.lease_id} 被 {e.actor} 收回（{LEASE_END_ZH.get(d.reason, d.reason.value)}）", bool(d.detail)


def _expired(e: LeaseExpired, run: int | None) -> Said:
    last = e.data.last_renewed_at
    renewed = f"；最后一次续租 {last.isoformat()}" if last else "；从未续租"
    return f"租约 {e.data.lease_id} 过期：节点代理停止了续租{renewed}", False


def _released(e: LeaseReleased, run: int | None) -> Said:
    d = e.data
    held = _hours((d.ended_at - d.granted_at).total_seconds())
    return f"租约 {d.lease_id} 已释放（{LEASE_END_ZH.get(d.reason, d.reason.value)}），在 {d.gpus} 张 GPU 上持续 {held}", False


def _usage(e: UsageRecorded, run: int | None) -> Said:
    d = e.data
    return f"向项目 {d.project} 计费 {d.gpu_seconds / 3600:.4f} GPU 小时（{d.card_type}），成本 {d.cost:.4f}", False


def _requeued(e: TaskRequeued, run: int | None) -> Said:
    d = e.data
    resume = f"；将从检查点 {d.resume_from} 继续" if d.resume_from else "；将从头开始"
    return f"重新排队：{_reason(d.reason)}{resume}", bool(d.detail)


def _succeeded(e: TaskSucceeded, run: int | None) -> Said:
    d = e.data
    output = f"，产出 {output_units_text(d.output_units)} 单位" if d.output_units is not None else ""
    if not d.flags:
        return f"运行成功{output}", False
    claimed = f"（申报 {output_units_text(d.claimed_output_units)}，已拒收）" if d.claimed_output_units is not None else ""
    flags = "、".join(_reason(flag) for flag in d.flags)
    return f"运行成功{output}{claimed}，但被标记待复核（{flags}）：产出不计入统计", bool(d.flag_detail)


def _failed(e: TaskFailed, run: int | None) -> Said:
    code = f"（退出码 {e.data.exit_code}）" if e.data.exit_code is not None else ""
    return f"运行失败{code}", bool(e.data.error)


def _cancelled(e: TaskCancelled, run: int | None) -> Said:
    return "已取消", bool(e.data.reason)


def _reason(value: str) -> str:
    return f"{REASON_LABELS_ZH.get(value, value)}（{value}）"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} 小时" if seconds >= 360 else f"{seconds:.0f} 秒"


TELL_ZH: Mapping[type[Envelope], Callable[[Envelope, int | None], Said]] = {
    TaskSubmitted: _submitted, TaskRejected: _rejected, TaskCancelRequested: _cancel_requested,
    TaskFlagCleared: _flag_cleared, TaskReadinessChanged: _readiness, DataReadySignalled: _data_ready,
    TaskMatched: _matched, TaskUnmatchable: _unmatchable, TaskQueued: _queued, TaskHeld: _held,
    TaskApproved: _approved, LeaseGranted: _granted, TaskStarted: _started, TaskCheckpointed: _checkpointed,
    LeaseRevoked: _revoked, LeaseExpired: _expired, LeaseReleased: _released, UsageRecorded: _usage,
    TaskRequeued: _requeued, TaskSucceeded: _succeeded, TaskFailed: _failed, TaskCancelled: _cancelled,
}  # type: ignore[dict-item]  # fmt: skip
"""The Chinese teller of each event class the audit story tells."""


def step_sentence_zh(event: Envelope, run: int | None) -> Said:
    """The step of `event` (in run `run`) in Chinese; for a type this table does not tell, its
    Chinese event name is all there is, and the English sentence is needed beside it."""
    teller = TELL_ZH.get(type(event))
    if teller is None:
        return event_type_label(event.type, "zh"), True
    return teller(event, run)


def step_told_in(step: StoryStep, lang: Language, match_why: str | None = None) -> dict[str, Any]:
    """What `GET /v1/audit/why?lang=` adds to a step: its event's name, its reason's name, its
    sentence in `lang` and the English one as `original` where the Chinese leaves words out.
    `match_why`: a `task.matched` step's choice in Chinese, from the numbers the matcher stored."""
    if lang == "en" or step.event is None:
        return {"event_label": step.type, "reason_label": step.reason, "sentence": step.sentence, "original": None}
    sentence, original_needed = step_sentence_zh(step.event, step.run)
    if match_why and step.type == TaskMatched.model_fields["type"].default:
        sentence, original_needed = f"{sentence}——{match_why}", False
    return {"event_label": event_type_label(step.type, "zh"), "reason_label": reason_name_zh(step.reason),
            "sentence": sentence, "original": step.sentence if original_needed else None}  # fmt: skip


def reason_name_zh(reason: str | None) -> str | None:
    """A step's or run's machine reason in Chinese (a task reason, a state, or why a lease ended)."""
    if reason is None:
        return None
    return REASON_LABELS_ZH.get(reason) or STATE_LABELS["zh"].get(reason) or LEASE_END_ZH.get(reason) or reason
