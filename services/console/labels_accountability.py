"""Labels of the rounds, match-review and change-log pages, in English and Chinese (简体中文).

Kept apart from `services.console.labels` (which holds the other pages' words) so each module
stays readable; `services.console.pages.templating.labels_for` merges them.
"""

from __future__ import annotations

from services.console.labels import Language
from services.ledger.review_reasons import VERDICT_LABELS



def _verdicts(lang: Language) -> dict[str, str]:
    """The verdicts' labels keyed by their values (`L[t.verdict]`), from their enum's own labels."""
    return {verdict.value: label for verdict, label in VERDICT_LABELS[lang].items()}


ACCOUNTABILITY_LABELS: dict[Language, dict[str, str]] = {
    "en": {
        "nav_rounds": "Rounds", "nav_audit": "Change log",
        "rounds_title": "Rounds: what each period cost, what it produced, and what we learned",
        "rounds_intro": "A round closes at the end of its period (the policy's rounds.period_days) or by hand, with a one-line retrospective. Its report is kept in the database and in the reports bucket (CSV, JSON, HTML).",
        "round_col": "Round", "period_col": "Period", "closed_by": "Closed by", "how": "How", "note": "Retrospective",
        "report": "Report in the bucket", "trend_plot": "Cost per round", "close_round": "Close the open round now",
        "close_submit": "Close round", "note_label": "Retrospective note (one line)", "reason_label": "Reason for the record",
        "round_closed": "Round closed.", "note_amended": "Note amended; earlier versions are kept below.",
        "round_title": "Round", "totals": "Totals", "busy_share": "Busy share", "idle_gpu_hours": "Idle GPU-hours",
        "preemption_losses": "Preemption losses", "lost_gpu_hours": "Lost GPU-hours", "by_scenario": "By scenario",
        "estimates": "Estimate against actual", "est_runtime": "Estimated runtime", "actual_runtime": "Actual runtime",
        "ratio": "Actual / estimate", "est_cost": "Estimated cost", "idle_by_card": "Busy and idle GPU-hours per card type",
        "capacity": "Capacity GPU-hours", "busy": "Busy", "idle": "Idle", "notes": "Retrospective note and its history",
        "amend_note": "Amend the note", "amend_submit": "Save new version", "noted_at": "Noted",
        "spend_by_project": "Spend by project", "unit_cost_by_card": "Cost per output unit by card type",
        "review_link": "Match review of this round", "all_rounds": "All rounds",
        "flagged_title": "Flagged successes", "flags": "Flags", "output_held_back": "Output held back",
        "claimed_refused": "Claimed (refused)", "flag_why": "Why",
        "clear_flag": "Clear flag", "clear_flag_reason": "What you checked",
        "clear_flag_col": "Output checked?", "flag_cleared_task": "Flag cleared and recorded with your reason: the ledger counts the run's output, and this page shows the task as an ordinary success within seconds.", "flag_cleared": "Flag cleared and recorded with your reason: the ledger counts the run's output and takes it off this list within seconds.",
        "clear_flag_who": "A reviewer of the task's project (never its submitter) clears a flag after checking the output; the reason is recorded.",
        "flagged_intro": "Runs that reported success implausibly early or claimed output beyond the policy's bound: ended succeeded, but their output is counted in no total, group or cost per output unit above.",
        "review_title": "Match review: which matches were worth it",
        "review_intro": "Each finished task's chosen card against the ranked alternatives: worth it, oversized in hindsight (low utilisation, or a cheaper card would have met the same runtime), or underestimated. Cheapest output first.",
        "group_by": "Group by", "by_card_opt": "card type", "by_project_opt": "project", "by_profile_opt": "profile",
        "round_filter": "Round", "any_round": "all rounds", "mean_ratio": "Mean actual / estimate", "speed_corrections": "Speed factors to correct",
        "speed_intro": "Actual runtime over estimated runtime per card type and profile: far from 1 means the catalog's speed factor for that pair is off (try a correction with `cardflow config what-if` first).",
        "profile": "Profile", "min_ratio": "Min", "max_ratio": "Max", "verdict": "Verdict", "ran_on": "Ran on",
        "alternatives": "Alternatives", "util_pct": "GPU util. (time-weighted mean)", "reviewed_tasks": "Reviewed tasks",
        "simulated_word": "simulated", "runtime": "Runtime",
        "clock_note": "A figure marked “simulated ×N” comes from a simulated agent that runs N times faster than the wall clock: it is the wall-clock figure × N, so it compares with the matcher's estimates. GPU utilisation is the mean the agents reported, weighted by the time each report covers.",
        "audit_title": "Change log: who changed what, when and why",
        "audit_intro": "Every authenticated change (configuration, templates, quotas, approvals, cancels, tokens, rounds) from the audit archive, newest first. Needs the auditor role.",
        "actor_filter": "Actor", "type_filter": "Event type (or prefix ending in .)", "since_filter": "Since (ISO time)",
        "what": "What", "subject": "Subject", "apply": "Apply",
        "audit_trail": "Audit trail (from the hash-chained archive)", "runs": "Runs", "run": "Run",
        "granted": "Granted", "started": "Started", "ended": "Ended", "end_reason": "End", "checkpoints": "Checkpoints",
        "stopped_by": "Stopped by", "resumed_from": "Resumed from", "audit_needs_role": "The audit trail needs the auditor role",
        "match_review": "Match review", "not_reviewed": "Reviewed once the task has succeeded.",
        **_verdicts("en"),
    },
    "zh": {
        "nav_rounds": "轮次", "nav_audit": "变更记录",
        "rounds_title": "轮次：每个周期花了多少、产出多少、学到了什么",
        "rounds_intro": "轮次在周期结束时（策略的 rounds.period_days）或手动关闭，并附一句复盘。报告保存在数据库和报表存储桶中（CSV、JSON、HTML）。",
        "round_col": "轮次", "period_col": "周期", "closed_by": "关闭人", "how": "方式", "note": "复盘",
        "report": "存储桶中的报告", "trend_plot": "每轮成本", "close_round": "立即关闭当前轮次",
        "close_submit": "关闭轮次", "note_label": "复盘（一句话）", "reason_label": "记录原因",
        "round_closed": "轮次已关闭。", "note_amended": "复盘已修改；旧版本保留在下方。",
        "round_title": "轮次", "totals": "合计", "busy_share": "忙碌比例", "idle_gpu_hours": "空闲 GPU 小时",
        "preemption_losses": "抢占损失", "lost_gpu_hours": "损失 GPU 小时", "by_scenario": "按场景",
        "estimates": "预估与实际", "est_runtime": "预估运行时间", "actual_runtime": "实际运行时间",
        "ratio": "实际 / 预估", "est_cost": "预估成本", "idle_by_card": "各卡型忙碌与空闲 GPU 小时",
        "capacity": "总容量 GPU 小时", "busy": "忙碌", "idle": "空闲", "notes": "复盘及其历史",
        "amend_note": "修改复盘", "amend_submit": "保存新版本", "noted_at": "记录时间",
        "spend_by_project": "各项目花费", "unit_cost_by_card": "各卡型单位产出成本",
        "review_link": "本轮匹配复核", "all_rounds": "全部轮次",
        "flagged_title": "被标记的成功", "flags": "标记", "output_held_back": "暂不计入的产出",
        "claimed_refused": "申报（已拒收）", "flag_why": "原因",
        "clear_flag": "清除标记", "clear_flag_reason": "核查了什么",
        "clear_flag_col": "产出已核查？", "flag_cleared_task": "标记已清除，理由已记录：账本计入该运行的产出，此页将在几秒内显示为普通成功。", "flag_cleared": "标记已清除，理由已记录：账本将在几秒内计入该运行的产出，并将其从此列表移除。",
        "clear_flag_who": "由任务所属项目的审批人（不能是提交者）核查产出后清除标记，理由会被记录。",
        "flagged_intro": "这些运行过早报告成功，或申报的产出超出策略上限：任务以成功结束，但其产出不计入上方任何合计、分组或单位产出成本。",
        "review_title": "匹配复核：哪些匹配是值得的",
        "review_intro": "每个已完成任务所选卡型与候选卡型的对比：值得、事后看选大了（利用率低，或更便宜的卡也能达到同样运行时间）、或低估。单位产出成本低的排在前面。",
        "group_by": "分组", "by_card_opt": "卡型", "by_project_opt": "项目", "by_profile_opt": "负载类型",
        "round_filter": "轮次", "any_round": "全部轮次", "mean_ratio": "实际/预估 均值", "speed_corrections": "需修正的速度系数",
        "speed_intro": "各卡型与负载类型的实际运行时间与预估之比：远离 1 说明卡型目录中该组合的速度系数有偏差（先用 `cardflow config what-if` 试算修正）。",
        "profile": "负载类型", "min_ratio": "最小", "max_ratio": "最大", "verdict": "结论", "ran_on": "实际运行卡型",
        "alternatives": "候选卡型", "util_pct": "GPU 利用率（时间加权平均）", "reviewed_tasks": "已复核任务",
        "simulated_word": "模拟", "runtime": "运行时间",
        "clock_note": "标注“模拟 ×N”的数字来自比墙钟快 N 倍的模拟 agent：即墙钟数字 × N，可与匹配器的预估直接比较。GPU 利用率是 agent 上报值按各次上报覆盖时长加权的平均。",
        "audit_title": "变更记录：谁在何时改了什么、为什么",
        "audit_intro": "审计归档中的每一次经过认证的变更（配置、模板、配额、审批、取消、令牌、轮次），最新的在前。需要审计员角色。",
        "actor_filter": "操作者", "type_filter": "事件类型（或以 . 结尾的前缀）", "since_filter": "起始时间（ISO）",
        "what": "内容", "subject": "对象", "apply": "应用",
        "audit_trail": "审计轨迹（来自哈希链归档）", "runs": "运行", "run": "运行",
        "granted": "分配", "started": "开始", "ended": "结束", "end_reason": "结束原因", "checkpoints": "检查点",
        "stopped_by": "停止者", "resumed_from": "恢复自", "audit_needs_role": "审计轨迹需要审计员角色",
        "match_review": "匹配复核", "not_reviewed": "任务成功完成后才会复核。",
        **_verdicts("zh"),
    },
}
"""Labels of the accountability pages (services.console.pages.accountability)."""
