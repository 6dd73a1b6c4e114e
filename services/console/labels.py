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
    "repeatedly_idle": "多次空闲被回收",
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
    "operator_requeue": "运维人员重新排队",
    "no_fleet": "尚无 GPU 节点注册",
    "succeeded_flagged": "已完成（被标记待复核）",
    "implausibly_early_success": "成功过早（待复核）",
    "output_out_of_bounds": "产出超出上限（不计入）",
    "flag_cleared": "已清除复核标记",
}
"""Chinese names of machine reasons; the English console shows the machine value itself."""

UI_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "title": "cardflow console", "tasks": "Tasks", "task": "Task", "name": "Name", "state": "State",
        "reason": "Reason", "project": "Project", "card_type": "Card type", "node": "Node", "gpus": "GPUs",
        "cost": "Est. cost", "used_cost": "Cost so far", "progress": "Progress", "attempts": "Attempts", "template": "Template",
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
        "cost": "预估成本", "used_cost": "已用成本", "progress": "进度", "attempts": "尝试次数", "template": "模板",
        "updated": "更新时间", "board": "数据就绪看板", "ready": "数据就绪", "waiting": "等待数据",
        "checking": "检查中", "missing": "缺失输入", "fleet": "算力集群", "alive": "在线", "lost": "失联",
        "leased_gpus": "已占用 GPU", "nodes": "节点数", "all": "全部", "filter": "按状态筛选",
        "no_rows": "暂无数据", "unreachable": "无法连接 API", "unavailable": "暂不可用",
        "refreshed": "已刷新", "language": "English", "detail": "详情", "history": "历史", "mode": "模式",
        "priority": "优先级", "ready_share": "就绪比例", "total": "总计", "event": "事件", "actor": "操作者",
    },
}

REFUSAL_LABELS: dict[Language, dict[int, str]] = {
    "en": {
        400: "The request was not understood", 401: "Sign in first", 403: "Not allowed for your role or project",
        404: "Not found", 409: "Not possible in the current state", 413: "Too large", 415: "Not in a form the console takes",
        422: "Not accepted as entered", 429: "Too many requests; try again shortly", 503: "Not available right now",
    },
    "zh": {
        400: "无法理解该请求", 401: "请先登录", 403: "当前角色或项目无权执行此操作",
        404: "未找到", 409: "当前状态下无法执行", 413: "内容过大", 415: "格式不受支持",
        422: "输入未被接受", 429: "请求过于频繁，请稍后再试", 503: "服务暂不可用",
    },
}
"""A refused form's headline per HTTP status, in the reader's language; the API's own words follow it."""

REFUSAL_FALLBACK: dict[Language, str] = {"en": "Refused", "zh": "请求被拒绝"}


def refusal_label(status: int, lang: Language = "en") -> str:
    """The headline of a refusal with `status` (a generic one for a status without its own)."""
    return REFUSAL_LABELS[lang].get(status, REFUSAL_FALLBACK[lang])


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


PAGE_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "nav_board": "Readiness board", "nav_queue": "Queue", "nav_fleet": "Fleet", "nav_quotas": "Quotas",
        "nav_ledger": "Ledger", "nav_config": "Config", "nav_approvals": "Approvals",
        "approvals_title": "Approvals: tasks waiting for a reviewer", "approve": "Approve", "deny": "Deny",
        "decided_title": "Decided in the last {days} days", "decision": "Decision", "reviewer": "Reviewer", "decided_at": "Decided at", "approved": "approved", "denied": "denied",
        "approvals_intro": "Tasks the policy holds until a reviewer approves them. Approving or denying needs a reviewer's token and a reason; both are recorded with the decision.",
        "done_approve": "Approved.", "done_deny": "Denied.", "nav_tasks": "Tasks",
        "config_title": "Configuration: every version, who changed it and why", "document": "Document",
        "version": "Version", "action": "Action", "diff": "Diff", "diff_between": "Compare versions", "from_v": "from",
        "to_v": "to", "head": "in force", "compare": "Compare", "s3_version": "S3 version",
        "exports_title": "Task lists in the reports bucket", "exports_intro": "The task list and demand plan as CSV and JSON: once a UTC day on its own (trigger daily), and on demand (cardflow export). Yesterday's sits beside today's; each export of a day is a new version of the same keys.",
        "export_day": "Day", "export_trigger": "Trigger", "export_tasks": "Tasks", "export_objects": "Objects (key @ version)", "config_intro": "Documents are versioned in the config bucket; every change names its actor and reason. Pick two versions to see what changed.", "skip": "Skip to content", "switch_lang": "中文",
        "switch_lang_title": "切换到中文", "refresh_pause": "Pause refresh", "refresh_resume": "Resume refresh",
        "updated_at": "Shown at", "board_title": "Readiness board: what can run, what waits for what",
        "board_intro": "Open tasks grouped by what they wait for. Each group lists the oldest first.",
        "open_tasks": "open tasks", "waits_since": "Waiting since", "open_for": "Open for", "waited": "Waited", "inputs_missing": "Missing inputs",
        "sentence": "Why", "original": "Original", "history_link": "Last N days", "history_title": "How long tasks waited for data",
        "history_intro": "Tasks submitted in the last {days} days: time from submission until their last input was ready (still waiting: until now). A task's wait counts under each of its inputs.",
        "days": "days", "by_input": "By project and input", "by_day": "By day of submission", "input": "Input",
        "tasks_n": "Tasks", "median_wait": "Median wait", "max_wait": "Longest wait", "still_waiting": "Still waiting",
        "ended_unready": "Ended before ready", "day": "Day (UTC)", "snapshots": "Daily snapshots",
        "snapshots_intro": "The board is written to the reports bucket every day and on demand (`cardflow board --snapshot`).",
        "key": "Object key", "size": "Bytes", "versions": "Versions", "modified": "Last written",
        "queue_title": "Queue: in the order the dispatcher considers tasks",
        "queue_intro": "Ready and matched tasks that wait for GPUs or for quota, approval or an operator. Order: class, priority with aging, submit time.",
        "position": "#", "class": "Class", "estimate": "Estimate", "est_start": "Est. start", "preflight": "Pre-flight",
        "not_estimated": "not estimated yet", "check_data": "data", "check_card": "card", "check_approval": "approval",
        "check_quota": "quota", "check_deadline": "deadline", "check_gpus": "GPUs", "passed": "ok", "failed_check": "blocks",
        "unknown_check": "not yet", "queue_plot": "Tasks queued or held per class",
        "fleet_title": "Fleet: every GPU, what holds it and how busy it is",
        "fleet_intro": "One row per node, one cell per GPU: the class of the task holding it (or idle, reclaimed, lost) and its last reported utilisation.",
        "legend": "Legend", "util": "util", "online": "online", "lost_node": "lost", "util_plot": "GPU utilisation per card type (share of GPUs leased)",
        "agents_title": "Enrolled agents", "agents_intro": "Every GPU-host agent given its own Redis user through cardflow (`cardflow enroll`): who enrolled it, when and why; who unenrolled it. Shown to admins.",
        "agent": "Agent", "redis_user": "Redis user", "enrolled": "Enrolled", "unenrolled": "Unenrolled", "still_enrolled": "enrolled",
        "quotas_title": "Quotas: used, left and when they expire", "account": "Account", "amount": "GPU-hours",
        "used": "Used", "left": "Left", "burn": "Used / left", "valid_to": "Valid to", "countdown": "Expires in",
        "alerts": "Alerts", "burn_plot": "Share of each quota account left (burn-down)", "any_card": "any", "expired": "expired", "in_days": "{n} days", "expiring_soon": "expiring soon",
        "alert_expiring": "Quota {account} ({project}) expires in {days} days", "alert_repeats": "raised {n} times",
        "alert_kind_quota_threshold": "quota used", "alert_kind_quota_expiring": "quota expiring",
        "alert_kind_quota_hold": "held by quota", "alert_kind_quota_at_risk": "quota at risk",
        "alert_kind_approval_waiting": "approval waiting", "alert_kind_deadline_at_risk": "deadline at risk",
        "alert_kind_idle_reclaim": "idle reclaim", "alert_kind_task_failed": "task failed",
        "alert_kind_flagged_success": "success flagged for review",
        "alert_low": "Quota {account} ({project}) has {left} GPU-hours left ({used} used)",
        "ledger_title": "Ledger: what the GPUs cost and what they produced", "period": "Last {days} days",
        "all_time": "All time", "by_project": "By project", "by_card": "By card type", "gpu_hours": "GPU-hours",
        "cost": "Cost", "output": "Output", "unit": "Unit", "cost_per_unit": "Cost per unit", "leases": "Leases",
        "spend_plot": "Spend per project per day (UTC)", "task_title": "Task", "story": "Story", "submitted_by": "Submitted by",
        "submitted_at": "Submitted", "match": "Card-type matches", "rank": "Rank", "runtime": "Est. runtime",
        "fleet_gpus": "GPUs in fleet", "why_not": "Why not", "chosen": "chosen", "trigger": "Trigger",
        "catalog": "Catalog", "cancel": "Cancel this task", "cancel_reason": "Reason", "cancel_submit": "Request cancel",
        "cancel_sent": "Cancel requested.", "login": "Sign in",
        "login_hint": "Paste your API token. An admin creates tokens with `cardflow token create NAME --role ROLE`; on a machine running `cardflow up`, the instance's admin token is in <data dir>/admin.token (by default .cardflow/admin.token).", "logout": "Sign out", "token": "API token",
        "signed_in_as": "Signed in as", "not_signed_in": "not signed in", "unavailable": "Not available yet",
        "forbidden": "Not for your role",
        "nothing": "Nothing here.", "all_tasks": "All tasks", "blocker": "Waits for", "none": "none",
        "gpus": "GPUs", "node_col": "Node", "output_units": "Output", "error": "Error", "back": "Back",
        "no_plot": "No data for this plot yet.", "time": "Time (UTC)", "share": "share", "tasks_axis": "tasks",
        "cost_axis": "cost", "reason_code": "Machine reason",
        "operator_actions": "Operator actions", "operator_intro": "Needs an operator's token; each action records you and your reason.",
        "hold": "Hold", "hold_help": "Keep it out of the queue until released.", "release": "Release",
        "release_help": "Put it back into the queue.", "requeue": "Requeue",
        "requeue_help": "Stop its run; it waits again and resumes from its last checkpoint.",
        "set_priority": "Set priority", "new_priority": "New priority", "hold_sent": "Hold requested.",
        "release_sent": "Release requested.", "requeue_sent": "Requeue requested.", "priority_sent": "Priority change requested.",
        "drain": "Drain", "undrain": "Undrain", "drain_sent": "Drain requested.", "undrain_sent": "Undrain requested.",
        "drained": "drained", "draining": "draining", "drain_reason": "Reason",
    },
    "zh": {
        "nav_board": "数据就绪看板", "nav_queue": "队列", "nav_fleet": "算力集群", "nav_quotas": "配额",
        "nav_ledger": "账本", "nav_config": "配置", "nav_approvals": "审批",
        "approvals_title": "审批：等待审批人批准的任务", "approve": "批准", "deny": "拒绝",
        "decided_title": "近 {days} 天的审批决定", "decision": "决定", "reviewer": "审批人", "decided_at": "决定时间", "approved": "已批准", "denied": "已拒绝",
        "approvals_intro": "策略要求审批人批准后才能启动的任务。批准或拒绝需要审批人令牌和原因，二者都会随决定一起记录。",
        "done_approve": "已批准。", "done_deny": "已拒绝。", "nav_tasks": "任务",
        "config_title": "配置：每个版本、谁改的、为什么", "document": "文档",
        "version": "版本", "action": "操作", "diff": "差异", "diff_between": "比较版本", "from_v": "从",
        "to_v": "到", "head": "生效中", "compare": "比较", "s3_version": "S3 版本",
        "exports_title": "报表存储桶中的任务清单", "exports_intro": "任务清单和需求计划（CSV 与 JSON）：每个 UTC 日自动导出一次（触发：daily），也可随时导出（cardflow export）。昨天的清单与今天的并列；同一天再次导出是同一对象键的新版本。",
        "export_day": "日期", "export_trigger": "触发", "export_tasks": "任务数", "export_objects": "对象（键 @ 版本）", "config_intro": "文档在配置存储桶中按版本保存；每次修改都记录操作者和原因。选择两个版本查看改了什么。", "skip": "跳到正文", "switch_lang": "English",
        "switch_lang_title": "Switch to English", "refresh_pause": "暂停刷新", "refresh_resume": "恢复刷新",
        "updated_at": "显示时间", "board_title": "数据就绪看板：哪些任务可以运行，哪些在等待什么",
        "board_intro": "未结束的任务按等待原因分组，每组最早的排在前面。",
        "open_tasks": "个未结束任务", "waits_since": "等待起始", "open_for": "已提交", "waited": "已等待", "inputs_missing": "缺失输入",
        "sentence": "原因说明", "original": "原文", "history_link": "近 N 天", "history_title": "任务等待数据的时长",
        "history_intro": "近 {days} 天提交的任务：从提交到最后一个输入就绪的时间（仍在等待的计到现在）。一个任务的等待时间计入它的每个输入。",
        "days": "天", "by_input": "按项目和输入", "by_day": "按提交日期", "input": "输入",
        "tasks_n": "任务数", "median_wait": "等待时长中位数", "max_wait": "最长等待", "still_waiting": "仍在等待",
        "ended_unready": "未就绪即结束", "day": "日期 (UTC)", "snapshots": "每日快照",
        "snapshots_intro": "看板每天以及按需（`cardflow board --snapshot`）写入报表存储桶。",
        "key": "对象键", "size": "字节", "versions": "版本数", "modified": "最后写入",
        "queue_title": "队列：按调度器考虑的顺序", "queue_intro": "数据就绪且已匹配卡型、正在等待 GPU 或配额、审批、运维的任务。顺序：优先级类别、带老化的优先级、提交时间。",
        "position": "序号", "class": "类别", "estimate": "预估", "est_start": "预计开始", "preflight": "启动前检查",
        "not_estimated": "暂无预估", "check_data": "数据", "check_card": "卡型", "check_approval": "审批",
        "check_quota": "配额", "check_deadline": "截止时间", "check_gpus": "GPU", "passed": "通过", "failed_check": "阻塞",
        "unknown_check": "未检查", "queue_plot": "各类别排队或暂缓的任务数",
        "fleet_title": "算力集群：每张 GPU 被谁占用、有多忙",
        "fleet_intro": "每个节点一行，每张 GPU 一格：占用它的任务类别（或空闲、已回收、失联）以及最近上报的利用率。",
        "legend": "图例", "util": "利用率", "online": "在线", "lost_node": "失联", "util_plot": "各卡型 GPU 利用率（被占用的比例）",
        "agents_title": "已登记的代理", "agents_intro": "通过 cardflow（`cardflow enroll`）获得自己 Redis 用户的每个 GPU 主机代理：由谁、何时、为何登记；由谁注销。仅管理员可见。",
        "agent": "代理", "redis_user": "Redis 用户", "enrolled": "登记", "unenrolled": "注销", "still_enrolled": "已登记",
        "quotas_title": "配额：已用、剩余和到期时间", "account": "账户", "amount": "GPU 小时",
        "used": "已用", "left": "剩余", "burn": "已用 / 剩余", "valid_to": "有效期至", "countdown": "剩余天数",
        "alerts": "告警", "burn_plot": "各配额账户剩余比例（消耗曲线）", "any_card": "任意", "expired": "已过期", "in_days": "{n} 天", "expiring_soon": "即将到期",
        "alert_expiring": "配额 {account}（{project}）将在 {days} 天后到期", "alert_repeats": "已提醒 {n} 次",
        "alert_kind_quota_threshold": "配额用量", "alert_kind_quota_expiring": "配额将到期",
        "alert_kind_quota_hold": "因配额暂停", "alert_kind_quota_at_risk": "配额风险",
        "alert_kind_approval_waiting": "等待审批", "alert_kind_deadline_at_risk": "截止时间风险",
        "alert_kind_idle_reclaim": "空闲回收", "alert_kind_task_failed": "任务失败",
        "alert_kind_flagged_success": "成功待复核",
        "alert_low": "配额 {account}（{project}）仅剩 {left} GPU 小时（已用 {used}）",
        "ledger_title": "账本：GPU 花费与产出", "period": "近 {days} 天",
        "all_time": "全部", "by_project": "按项目", "by_card": "按卡型", "gpu_hours": "GPU 小时",
        "cost": "成本", "output": "产出", "unit": "单位", "cost_per_unit": "单位产出成本", "leases": "租约数",
        "spend_plot": "各项目每日花费 (UTC)", "task_title": "任务", "story": "经过", "submitted_by": "提交者",
        "submitted_at": "提交时间", "match": "卡型匹配", "rank": "排名", "runtime": "预估运行时间",
        "fleet_gpus": "集群 GPU 数", "why_not": "不选原因", "chosen": "已选", "trigger": "触发",
        "catalog": "卡型目录", "cancel": "取消此任务", "cancel_reason": "原因", "cancel_submit": "请求取消",
        "cancel_sent": "已请求取消。", "login": "登录",
        "login_hint": "粘贴你的 API 令牌。管理员用 `cardflow token create NAME --role ROLE` 创建令牌；在运行 `cardflow up` 的机器上，实例的管理员令牌在 <数据目录>/admin.token（默认 .cardflow/admin.token）。", "logout": "退出", "token": "API 令牌",
        "signed_in_as": "当前用户", "not_signed_in": "未登录", "unavailable": "暂不可用",
        "forbidden": "当前角色无权查看",
        "nothing": "暂无数据。", "all_tasks": "全部任务", "blocker": "等待", "none": "无",
        "gpus": "GPU 数", "node_col": "节点", "output_units": "产出", "error": "错误", "back": "返回",
        "no_plot": "此图暂无数据。", "time": "时间 (UTC)", "share": "比例", "tasks_axis": "任务数",
        "cost_axis": "成本", "reason_code": "机器原因",
        "operator_actions": "运维操作", "operator_intro": "需要运维人员令牌；每个操作都会记录你和你填写的原因。",
        "hold": "暂缓", "hold_help": "移出队列，直到被放行。", "release": "放行",
        "release_help": "放回队列。", "requeue": "重新排队",
        "requeue_help": "停止本次运行；任务重新等待，并从最近的检查点继续。",
        "set_priority": "设置优先级", "new_priority": "新优先级", "hold_sent": "已请求暂缓。",
        "release_sent": "已请求放行。", "requeue_sent": "已请求重新排队。", "priority_sent": "已请求修改优先级。",
        "drain": "排空", "undrain": "恢复", "drain_sent": "已请求排空。", "undrain_sent": "已请求恢复。",
        "drained": "已排空", "draining": "排空中", "drain_reason": "原因",
    },
}
"""Labels of the web pages (services.console.pages)."""

BLOCKER_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "running": "running", "runnable": "can run now", "data": "waiting for data", "quota": "quota",
        "approval": "approval", "deadline": "deadline at risk", "capacity": "no free GPUs", "reservation": "reservation",
        "no_card": "no card fits", "operator": "held by an operator", "checking": "being checked",
        "cancelling": "cancel requested",
    },
    "zh": {
        "running": "运行中", "runnable": "可立即运行", "data": "等待数据", "quota": "配额",
        "approval": "等待审批", "deadline": "截止时间有风险", "capacity": "GPU 不足", "reservation": "预留",
        "no_card": "无可用卡型", "operator": "运维暂缓", "checking": "检查中", "cancelling": "已请求取消",
    },
}
"""Names of the readiness board's groups (`services.console.blockers.BlockerKind`)."""

GPU_STATUS_LABELS: dict[Language, dict[str, str]] = {
    "en": {"core": "core", "standard": "standard", "opportunistic": "opportunistic", "idle": "idle",
           "reclaimed": "reclaimed", "lost": "lost"},
    "zh": {"core": "核心", "standard": "标准", "opportunistic": "机会型", "idle": "空闲",
           "reclaimed": "已回收", "lost": "失联"},
}  # fmt: skip
"""Words beside the colours of the fleet grid (`services.console.fleet_grid.GpuStatus`); also class names."""


PROFILE_LABELS: dict[Language, dict[str, str]] = {
    "en": {"compute": "compute", "memory": "memory", "balanced": "balanced"},
    "zh": {"compute": "计算密集", "memory": "访存密集", "balanced": "均衡"},
}
"""Names of the workload profiles (`shared.scheduling.model.Profile`: what bounds a task's speed)."""


def profile_label(profile: str, lang: Language = "en") -> str:
    """The profile's name in `lang` (an unknown value as it is)."""
    return PROFILE_LABELS[lang].get(str(profile), str(profile))


def state_label(state: TaskState | str, lang: Language = "en") -> str:
    return STATE_LABELS[lang].get(str(state), str(state))


def reason_label(reason: str, lang: Language = "en") -> str:
    """The reason as shown: the machine value in English, its Chinese name (and value) in Chinese."""
    if lang == "zh" and reason in REASON_LABELS_ZH:
        return f"{REASON_LABELS_ZH[reason]} ({reason})"
    return reason


def reason_in_chinese(reason: str, detail: str | None) -> str:
    """A reason's Chinese name, then the API's English sentence about it marked 原文 (if there is one)."""
    original = f"（原文：{detail}）" if detail else ""
    return f"{reason_label(reason, 'zh')}{original}"


def all_labels() -> dict[str, object]:
    """Everything the web page needs, as JSON."""
    return {"states": STATE_LABELS, "reasons_zh": REASON_LABELS_ZH, "ui": UI_LABELS}
