"""Labels of the console and the CLI in English and Chinese (简体中文), and state colours.

One source for both: the CLI reads these dicts, the web page receives them as JSON (`/v1/labels`
and inlined into the page), so a label is changed in one place.
"""

from __future__ import annotations

from typing import Literal

from shared.events.states import TaskState

Language = Literal["en", "zh"]
LANGUAGES: tuple[Language, ...] = ("en", "zh")

STATE_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "submitted": "submitted", "waiting_data": "waiting for data", "unmatchable": "no card fits",
        "queued": "queued", "held": "held", "leased": "leased", "running": "running",
        "succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled", "rejected": "rejected",
    },
    "zh": {
        "submitted": "已提交", "waiting_data": "等待数据", "unmatchable": "无可用卡型",
        "queued": "排队", "held": "暂缓", "leased": "已分配", "running": "运行中",
        "succeeded": "已完成", "failed": "失败", "cancelled": "已取消", "rejected": "已拒绝",
    },
}

REASON_LABELS_ZH: dict[str, str] = {
    "awaiting_readiness": "等待数据检查",
    "awaiting_match": "等待匹配卡型",
    "awaiting_dispatch": "等待调度",
    "data_not_ready": "数据未就绪",
    "queued": "排队等待 GPU",
    "leased": "已分配 GPU，等待启动",
    "running": "运行中",
    "cancel_requested": "已请求取消",
    "succeeded": "已完成",
    "failed": "失败",
    "cancelled": "已取消",
    "rejected": "提交被拒绝",
    "quota_exhausted": "配额不足",
    "quota_expires": "配额即将到期",
    "quota_not_yet_valid": "配额尚未生效",
    "no_quota_account": "无配额账户",
    "not_approved": "等待审批",
    "deadline_unreachable": "无法在截止时间前完成",
    "operator": "运维人员暂缓",
    "unmatched": "尚未匹配卡型",
    "no_capacity": "GPU 容量不足",
    "headroom": "保留余量",
    "reserved": "GPU 已被预留",
    "behind_reservation": "排在预留之后",
    "head_of_line": "等待队首任务",
    "awaiting_preemption": "等待抢占完成",
    "heavy_spread": "重负载任务分散",
    "no_allowed_card_type": "没有允许的卡型",
    "insufficient_vram": "显存不足",
    "too_many_gpus": "GPU 数量超过集群",
    "empty_catalog": "卡型目录为空",
    "preempted": "被抢占，重新排队",
    "lease_expired": "租约过期，重新排队",
    "reclaimed_idle": "空闲回收，重新排队",
    "agent_failed": "节点代理失败，重新排队",
}
"""Chinese names of machine reasons; the English console shows the machine value itself."""

UI_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "title": "cardflow console", "tasks": "Tasks", "task": "Task", "name": "Name", "state": "State",
        "reason": "Reason", "project": "Project", "card_type": "Card type", "node": "Node", "gpus": "GPUs",
        "cost": "Est. cost", "used_cost": "Cost so far", "progress": "Progress", "attempts": "Attempts",
        "updated": "Updated", "board": "Readiness board", "ready": "data ready", "waiting": "waiting for data",
        "checking": "checking", "missing": "Missing inputs", "fleet": "Fleet", "alive": "online", "lost": "lost",
        "leased_gpus": "Leased GPUs", "nodes": "Nodes", "all": "all", "filter": "State filter",
        "no_rows": "nothing here yet", "unreachable": "API unreachable", "unavailable": "not available",
        "refreshed": "refreshed", "language": "中文", "detail": "Detail", "history": "History", "mode": "Mode",
        "priority": "Priority", "ready_share": "Ready", "total": "Total", "event": "Event", "actor": "Actor",
    },
    "zh": {
        "title": "cardflow 控制台", "tasks": "任务", "task": "任务", "name": "名称", "state": "状态",
        "reason": "原因", "project": "项目", "card_type": "卡型", "node": "节点", "gpus": "GPU 数",
        "cost": "预估成本", "used_cost": "已用成本", "progress": "进度", "attempts": "尝试次数",
        "updated": "更新时间", "board": "数据就绪看板", "ready": "数据就绪", "waiting": "等待数据",
        "checking": "检查中", "missing": "缺失输入", "fleet": "算力集群", "alive": "在线", "lost": "失联",
        "leased_gpus": "已占用 GPU", "nodes": "节点数", "all": "全部", "filter": "按状态筛选",
        "no_rows": "暂无数据", "unreachable": "无法连接 API", "unavailable": "暂不可用",
        "refreshed": "已刷新", "language": "English", "detail": "详情", "history": "历史", "mode": "模式",
        "priority": "优先级", "ready_share": "就绪比例", "total": "总计", "event": "事件", "actor": "操作者",
    },
}

STATE_STYLES: dict[TaskState, str] = {
    TaskState.SUBMITTED: "cyan",
    TaskState.WAITING_DATA: "yellow",
    TaskState.UNMATCHABLE: "magenta",
    TaskState.QUEUED: "blue",
    TaskState.HELD: "dark_orange",
    TaskState.LEASED: "bright_cyan",
    TaskState.RUNNING: "bold green",
    TaskState.SUCCEEDED: "green",
    TaskState.FAILED: "bold red",
    TaskState.CANCELLED: "grey50",
    TaskState.REJECTED: "red",
}
"""Rich styles per state, for `cardflow tasks/status`."""


def state_label(state: TaskState | str, lang: Language = "en") -> str:
    return STATE_LABELS[lang].get(str(state), str(state))


def reason_label(reason: str, lang: Language = "en") -> str:
    """The reason as shown: the machine value in English, its Chinese name (and value) in Chinese."""
    if lang == "zh" and reason in REASON_LABELS_ZH:
        return f"{REASON_LABELS_ZH[reason]} ({reason})"
    return reason


def all_labels() -> dict[str, object]:
    """Everything the web page needs, as JSON."""
    return {"states": STATE_LABELS, "reasons_zh": REASON_LABELS_ZH, "ui": UI_LABELS}
