"""Chinese names of every event type, keyed by the event classes of `shared.events` (one table).

The English console and CLI show the event type itself (`lease.granted`); in Chinese they show its
name here and keep the type beside it. A unit test checks that every class of
`shared.events.catalog.EVENT_CLASSES` has a name, so a new event type cannot appear untranslated.

    event_type_label("lease.granted", "zh")   # "已分配 GPU（租约）"
"""

from __future__ import annotations

from collections.abc import Mapping

from services.console.labels import Language
from shared.events import (
    AgentEnrolled, AgentUnenrolled, ConfigChanged, DataReadySignalled, Envelope, LeaseExpired,
    LeaseGranted, LeaseReleased, LeaseRenewed, LeaseRevoked, NodeDrained, NodeDrainRequested, NodeLost, NodeRegistered,
    NodeUndrained, NodeUndrainRequested, QuotaAdjusted, QuotaExpiring, QuotaGranted, QuotaThresholdCrossed, RoundClosed,
    RoundNoteAmended, TaskApprovalDelayed, TaskApproved, TaskCancelled, TaskCancelRequested, TaskCheckpointed,
    TaskDeadlineEndangered, TaskDenied, TaskFailed, TaskFlagCleared, TaskHeld, TaskHoldRequested, TaskMatched,
    TaskPriorityChanged, TaskPriorityChangeRequested, TaskQueued, TaskQuotaEndangered, TaskReadinessChanged,
    TaskRejected, TaskReleased, TaskReleaseRequested, TaskRequeued, TaskRequeueRequested, TaskReviewed, TaskStarted,
    TaskSubmitted, TaskSucceeded, TaskUnmatchable, TemplateChanged, TokenCreated, TokenRevoked, UsageBatchRecorded, UsageRecorded,
)  # fmt: skip
from shared.events.deadletters import DeadLetterPurged, DeadLetterReplayed

EVENT_LABELS_ZH: Mapping[type[Envelope], str] = {
    # intake
    TaskSubmitted: "已提交", TaskRejected: "提交被拒绝", TaskCancelRequested: "请求取消", TaskReviewed: "审批决定",
    TaskFlagCleared: "已清除复核标记", DataReadySignalled: "输入数据已通知就绪",
    # readiness, matcher
    TaskReadinessChanged: "数据就绪检查", TaskMatched: "已匹配卡型", TaskUnmatchable: "无可用卡型",
    # dispatcher: tasks
    TaskQueued: "进入队列", TaskHeld: "暂缓", TaskApproved: "已批准", TaskDenied: "已拒绝（审批）",
    TaskStarted: "开始运行", TaskCheckpointed: "保存检查点", TaskSucceeded: "运行成功", TaskFailed: "运行失败",
    TaskRequeued: "重新排队", TaskCancelled: "已取消", TaskDeadlineEndangered: "截止时间有风险",
    TaskQuotaEndangered: "配额有风险", TaskApprovalDelayed: "审批迟迟未决",
    # dispatcher: leases and nodes
    LeaseGranted: "已分配 GPU（租约）", LeaseRenewed: "租约续期", LeaseExpired: "租约过期",
    LeaseRevoked: "租约被收回", LeaseReleased: "租约已释放", NodeRegistered: "节点注册", NodeLost: "节点失联",
    # ledger
    UsageRecorded: "记录用量", UsageBatchRecorded: "批量记录用量", QuotaGranted: "授予配额", QuotaAdjusted: "调整配额",
    QuotaThresholdCrossed: "配额用量越过阈值", QuotaExpiring: "配额即将到期", RoundClosed: "结算周期关闭",
    RoundNoteAmended: "修改周期复盘备注",
    # config, identity, dead letters
    ConfigChanged: "配置变更", TemplateChanged: "模板变更", TokenCreated: "创建令牌", TokenRevoked: "吊销令牌",
    AgentEnrolled: "节点代理登记", AgentUnenrolled: "节点代理注销", DeadLetterReplayed: "死信重放", DeadLetterPurged: "死信清除",
    # operators' verbs: requests, and the dispatcher's answers
    TaskHoldRequested: "请求暂缓", TaskReleaseRequested: "请求放行", TaskRequeueRequested: "请求重新排队",
    TaskPriorityChangeRequested: "请求修改优先级", NodeDrainRequested: "请求排空节点",
    NodeUndrainRequested: "请求恢复节点", TaskReleased: "已放行", TaskPriorityChanged: "优先级已修改",
    NodeDrained: "节点已排空", NodeUndrained: "节点已恢复",
}  # fmt: skip
"""Chinese name of each event class."""

EVENT_TYPE_LABELS_ZH: Mapping[str, str] = {cls.model_fields["type"].default: label for cls, label in EVENT_LABELS_ZH.items()}
"""The same names by event type string (`"lease.granted"`), as events arrive in the views and the archive."""


def event_type_label(event_type: str, lang: Language = "en") -> str:
    """The event type as a reader sees it: the type itself in English, its Chinese name in Chinese
    (the type itself for one this table does not know, e.g. from a newer producer)."""
    return EVENT_TYPE_LABELS_ZH.get(event_type, event_type) if lang == "zh" else event_type
