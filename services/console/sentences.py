"""A task's reason as a sentence in the reader's language (pure).

English: the sentence the owning service wrote (`TaskView.reason_detail`), verbatim. 中文: a
template keyed by the machine reason's value (`ViewReason`, `DeferralReason`, `UnmatchableReason`,
`RequeueReason`), filled from the view's structured fields — never by translating the English
text, so the templates survive other services rewording their sentences. A unit test checks that
every value of those enums has a template. Where a sentence carries numbers the view does not hold
(quota amounts, VRAM sizes), the page shows the service's English sentence beside it as 原文.

    reason_sentence(view, "zh")   # "等待 2 个输入（已就绪 33%）：s3://lake/corpus/2025-06/, tokens@3"
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from string import Formatter
from typing import Any

from services.console.labels import GPU_STATUS_LABELS, REASON_LABELS_ZH, Language
from shared.events.reasons import RequeueReason, UnmatchableReason
from shared.task_view import TaskView, ViewReason, output_units_text
from shared.scheduling.model import DeferralReason

MISSING = "?"
MAX_INPUTS_SHOWN = 5

ZH_TEMPLATES: Mapping[str, str] = {
    ViewReason.AWAITING_READINESS: "等待检查输入数据是否就绪",
    ViewReason.AWAITING_MATCH: "输入数据已就绪，等待匹配卡型",
    ViewReason.AWAITING_DISPATCH: "数据就绪且已匹配卡型，等待调度器排队",
    ViewReason.DATA_NOT_READY: "等待 {missing_count} 个输入（已就绪 {ready_pct}）：{missing_inputs}",
    ViewReason.QUEUED: "在 GPU 队列中等待（{priority_class}，优先级 {priority}）",
    ViewReason.LEASED: "已分配节点 {node_id}（{card_type}）的 GPU {gpu_indices}，等待节点代理启动",
    ViewReason.RUNNING: "正在节点 {node_id} 上运行（{card_type}，GPU {gpu_indices}）",
    ViewReason.CANCEL_REQUESTED: "已请求取消（{cancel_reason}），等待调度器结束任务",
    ViewReason.SUCCEEDED: "已在节点 {node_id} 上成功完成，产出 {output_units} 单位",
    ViewReason.SUCCEEDED_FLAGGED: "已完成，但成功报告被标记待复核（{flags}），产出不计入统计",
    ViewReason.FAILED: "运行失败（错误信息见原文）",
    ViewReason.CANCELLED: "已按请求取消",
    ViewReason.REJECTED: "提交被拒绝，问题字段：{problem_fields}",
    DeferralReason.QUOTA_EXHAUSTED: "项目 {project} 的配额不足以支付此任务的预估用量（约 {est_gpu_hours} GPU 小时）",
    DeferralReason.QUOTA_EXPIRES: "项目 {project} 的配额会在此任务预计结束之前到期",
    DeferralReason.QUOTA_NOT_YET_VALID: "项目 {project} 的配额尚未生效",
    DeferralReason.NO_QUOTA_ACCOUNT: "项目 {project} 没有配额账户，策略要求先授予配额",
    DeferralReason.NOT_APPROVED: "此任务规模较大（{gpus} 张 GPU），需要审批人批准后才能启动",
    DeferralReason.DEADLINE_UNREACHABLE: "无法在截止时间之前完成",
    DeferralReason.OPERATOR: "运维人员暂缓了此任务",
    DeferralReason.REPEATEDLY_IDLE: "GPU 多次因空闲被回收，已暂缓，等待人工检查（放行或取消）",
    DeferralReason.UNMATCHED: "尚未匹配卡型",
    DeferralReason.NO_CAPACITY: "当前没有足够的空闲 {card_type} GPU（需要 {gpus} 张），等待正在运行的任务释放",
    DeferralReason.HEADROOM: "{card_type} 的保留余量不供 standard 任务使用，等待其他 GPU 空闲",
    DeferralReason.RESERVED: "已为此任务预留 {card_type} GPU，等待正在运行的任务结束后启动",
    DeferralReason.BEHIND_RESERVATION: "现在启动会推迟一个已预留 GPU 的更高优先级任务",
    DeferralReason.HEAD_OF_LINE: "排在一个无法启动的队首任务之后",
    DeferralReason.AWAITING_PREEMPTION: "正在抢占低优先级任务（先保存检查点），为它腾出 GPU",
    DeferralReason.HEAVY_SPREAD: "每个合适的节点上重负载任务都已达到上限",
    UnmatchableReason.NO_ALLOWED_CARD_TYPE: "允许/禁止的卡型设置排除了所有卡型",
    UnmatchableReason.INSUFFICIENT_VRAM: "没有任何允许的卡型有足够的单卡显存",
    UnmatchableReason.TOO_MANY_GPUS: "需要 {gpus} 张 GPU，超过集群中任何允许卡型的数量",
    UnmatchableReason.EMPTY_CATALOG: "卡型目录为空",
    UnmatchableReason.NO_FLEET: "还没有 GPU 节点注册；节点注册后会重新匹配",
    RequeueReason.PREEMPTED: "被更高优先级任务抢占，已重新排队{resume}",
    RequeueReason.LEASE_EXPIRED: "节点代理未按时续租，租约过期，已重新排队{resume}",
    RequeueReason.RECLAIMED_IDLE: "GPU 长时间空闲被回收，已重新排队{resume}",
    RequeueReason.AGENT_FAILED: "节点代理无法运行此任务，已重新排队{resume}",
    RequeueReason.OPERATOR_REQUEUE: "运维人员停止了本次运行并重新排队{resume}",
}
"""Chinese sentence per machine reason value; `{field}`s come from `sentence_fields`.
(`DeferralReason.DATA_NOT_READY` has the value of `ViewReason.DATA_NOT_READY`: one template serves both.)"""

EXACT_IN_ZH = frozenset({
    ViewReason.AWAITING_READINESS, ViewReason.AWAITING_MATCH, ViewReason.AWAITING_DISPATCH,
    ViewReason.DATA_NOT_READY, ViewReason.QUEUED, ViewReason.LEASED, ViewReason.RUNNING,
    ViewReason.SUCCEEDED, ViewReason.CANCELLED, UnmatchableReason.NO_FLEET,
})  # fmt: skip
"""Reasons whose Chinese sentence says everything the English one does (no 原文 needed)."""


def _missing_inputs(view: TaskView) -> str | None:
    inputs = ", ".join(view.missing_inputs[:MAX_INPUTS_SHOWN])
    if len(view.missing_inputs) > MAX_INPUTS_SHOWN:
        inputs += f" 等 {len(view.missing_inputs)} 个"
    return inputs or None


def _est_gpu_hours(view: TaskView) -> str | None:
    return f"{view.match.est_runtime_s * (view.gpus or 1) / 3600:.1f}" if view.match else None


_FIELD_VALUES: Mapping[str, Callable[[TaskView], Any]] = {
    "missing_count": lambda view: len(view.missing_inputs),
    "ready_pct": lambda view: f"{view.ready_fraction:.0%}" if view.ready_fraction is not None else None,
    "missing_inputs": _missing_inputs,
    "priority_class": lambda view: GPU_STATUS_LABELS["zh"][view.priority_class.value] if view.priority_class else None,
    "priority": lambda view: view.priority,
    "node_id": lambda view: view.node_id,
    "card_type": lambda view: view.card_type,
    "gpu_indices": lambda view: ",".join(map(str, view.gpu_indices)) or None,
    "gpus": lambda view: view.gpus,
    "project": lambda view: view.project,
    "cancel_reason": lambda view: view.cancel_reason or None,
    "output_units": lambda view: output_units_text(view.output_units) if view.output_units is not None else None,
    "problem_fields": lambda view: "、".join(p.field for p in view.problems) or None,
    "est_gpu_hours": _est_gpu_hours,
    "resume": lambda view: f"，将从检查点 {view.last_checkpoint} 继续" if view.last_checkpoint else "，将从头开始",
    "flags": lambda view: "、".join(REASON_LABELS_ZH.get(flag, flag) for flag in view.flags) or None,
}
"""How each `{field}` a template may use is read from the view."""


def sentence_fields(view: TaskView, names: Iterable[str] | None = None) -> dict[str, str]:
    """The values a template may use (only `names`, if given), as text (unknown ones as `?`)."""
    values = ((name, _FIELD_VALUES[name](view)) for name in (_FIELD_VALUES if names is None else names))
    return {name: MISSING if value is None else str(value) for name, value in values}


def history_facts(view: TaskView) -> dict[str, str]:
    """What a history line stores to render its Chinese sentence later: the fields its reason's template uses
    (none for a reason without a template). The views store one per applied event, about six per task: the
    whole `sentence_fields` was ~320 bytes of JSON a line, most of it for other reasons' templates."""
    return sentence_fields(view, _TEMPLATE_FIELDS.get(view.reason, ()))


def reason_sentence(view: TaskView, lang: Language) -> str:
    """The view's reason sentence in `lang` (English: the service's own sentence)."""
    if lang != "zh":
        return view.reason_detail
    # a reason added after this table: the English sentence, never nothing
    return sentence_from_fields(view.reason, sentence_fields(view)) or view.reason_detail


def needs_original(view: TaskView, lang: Language) -> bool:
    """True when the Chinese sentence leaves out details the service's English sentence has."""
    return lang == "zh" and bool(view.reason_detail) and view.reason not in EXACT_IN_ZH


def sentence_from_fields(reason: str, fields: Mapping[str, str] | None) -> str | None:
    """The Chinese sentence of `reason` filled from `fields` (stored `sentence_fields`); None when
    the reason has no template or no fields were stored (history written before they were)."""
    template = ZH_TEMPLATES.get(reason)
    if template is None or fields is None:
        return None
    return template.format_map(_Fields(fields))


class _Fields(dict[str, str]):
    """Stored fields; a field added to a template after they were stored reads as `?`."""

    def __missing__(self, key: str) -> str:
        return MISSING


def template_fields(template: str) -> set[str]:
    """The `{field}` names a template uses (for the test that every one is provided)."""
    return {name for _, name, _, _ in Formatter().parse(template) if name}


_TEMPLATE_FIELDS: Mapping[str, tuple[str, ...]] = {
    reason: tuple(sorted(template_fields(template))) for reason, template in ZH_TEMPLATES.items()
}
"""The fields each reason's template uses."""


def history_sentence(reason: str, detail: str, facts: Mapping[str, str] | None, lang: Language) -> tuple[str | None, bool]:
    """A history line's sentence in `lang` and whether the service's English `detail` must be shown
    beside it as 原文: English is the detail itself; Chinese is rendered from the line's stored
    fields, or None (only the English detail exists: shown as 原文, never machine-translated)."""
    if lang != "zh":
        return detail, False
    sentence = sentence_from_fields(reason, facts)
    if sentence is None:
        return None, bool(detail)
    return sentence, bool(detail) and reason not in EXACT_IN_ZH
