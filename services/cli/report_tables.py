"""What the audit, round and review commands share: their words (English and Chinese), tables, JSON.

`LABELS` holds every column title and sentence of `cardflow audit`, `cardflow round`, `cardflow matches`
and `cardflow review`, per language; `table` titles and heads a rich table in the asked language.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.lang import CliLang

console = Console()
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded with the change")]


LABELS: dict[str, dict[str, str]] = {
    "en": {
        "check": "check", "result": "result", "time": "time", "actor": "actor", "event": "event", "run": "run",
        "what": "what happened", "node": "node", "card": "card", "gpus": "GPUs", "granted": "granted",
        "ended": "ended", "why_ended": "why it ended", "gpu_hours": "GPU-h", "cost": "cost", "output": "output",
        "state": "state", "tasks": "tasks", "key": "key", "note": "note", "round": "round", "from": "from",
        "to": "to", "closed_by": "closed by", "verdict": "verdict", "reason": "reason", "ratio": "actual/est",
        "cost_per_unit": "cost/unit", "subject": "subject", "model": "model", "difference": "difference",
        "est_runtime": "est. runtime h", "est_cost": "est. cost", "hindsight_runtime": "hindsight h",
        "hindsight_cost": "hindsight cost", "account": "account", "used": "used GPU-h", "left": "left GPU-h",
        "lease": "lease", "task": "task", "first": "first", "second": "second", "change": "change",
        "runtime": "runtime h", "util": "GPU util %", "clock": "clock", "ran_on": "ran on",
        "simulated_group": "{key}: {clock} — its runtimes, GPU-hours and costs are the wall clock's x the agent's time scale",
        "util_note": "GPU util % = the mean the agents reported, weighted by the time each report covers",
        "flags": "flags", "claimed": "claimed (refused)", "flagged successes (output not counted)":
        "flagged successes (output not counted)",
        "review_by": "review by {by}", "reviewed": "reviewed tasks", "speed": "actual / estimated runtime",
        "ranking": "ranking", "chosen_mark": " (chosen)", "ran_on_mark": " (ran on)", "catalog": "catalog",
        "per_unit_said": "cost per output unit", "no_verdict": "not finished yet: no verdict",
        "match_review": "match review", "then": "; ", "colon": ": ", "profile": "profile",
        "flag_cleared": "task {task}: flag cleared by {actor}; the ledger now counts its held-back output ({units} units)",
        "why_headline": "[bold]{name}[/bold] ({task}), project {project}: {state} — {reason}; {gpu_hours:.4f} GPU-h,"
                        " cost {cost:.4f}, output {output}",
        "runs": "runs", "steps": "steps", "original": "original: ",
        "by_card": "card", "by_project": "project", "by_profile": "profile",
        "note_saved": "round {round}: note version {version}", "until_zone": "give --until a time zone (Z, +08:00, ...)",
        "audit verify": "audit verify", "leases in force": "leases in force", "quotas": "quotas",
        "spend by project": "spend by project", "spend by card": "spend by card", "audit log": "audit log",
        "rounds": "rounds", "totals": "totals", "by project": "by project", "by scenario": "by scenario", "by card": "by card",
        "chain": "chain", "segments": "segments", "completeness": "completeness", "models": "models",
        "chain_holds": "{events} events, holds", "chain_broken": "{events} events, BROKEN at {seq}: {detail}",
        "segments_unchecked": "{count}, not checked (no object storage)", "segments_hold": "{count}, hold",
        "segments_problems": "{count}, {problems} problem(s)", "complete": "every published event is archived",
        "incomplete": "{lost} published event(s) not in the archive", "models_equal": "replay equals the live state",
        "models_differ": "{n} difference(s)",
        "segment_problem": "[red]segment {segment_no}:[/red] {detail}",
        "not_archived": "[red]not archived:[/red] {type} {event_id} ({subject}), published by {schema} at {at}",
        "not_running": "not compared (service never ran): {names}",
        "first_break": "[bold red]first breaking event:[/bold red] #{seq} {event_id} {type} {subject} at {at} — {what}",
        "history_holds": "[green]the history holds[/green]", "history_broken": "[red]the history does NOT hold[/red]",
        "as_of": "as of {at}: {events} events",
        "round_headline": "[bold]round {round}[/bold] {starts} – {ends}, closed by {by}: {note}",
        "report_at": "report: {uri}report.html (.json, .csv)", "note_version": "note v{version} by {actor}: {note}",
    },
    "zh": {
        "check": "检查项", "result": "结果", "time": "时间", "actor": "操作者", "event": "事件", "run": "运行",
        "what": "经过", "node": "节点", "card": "卡型", "gpus": "GPU 数", "granted": "分配时间", "ended": "结束时间",
        "why_ended": "结束原因", "gpu_hours": "GPU 小时", "cost": "成本", "output": "产出", "state": "状态",
        "tasks": "任务数", "key": "分组", "note": "复盘备注", "round": "周期", "from": "开始", "to": "结束",
        "closed_by": "结算人", "verdict": "结论", "reason": "理由", "ratio": "实际/预估", "cost_per_unit": "单位产出成本",
        "subject": "对象", "model": "模型", "difference": "差异", "est_runtime": "预估时长 h", "est_cost": "预估成本",
        "hindsight_runtime": "事后时长 h", "hindsight_cost": "事后成本", "account": "账户", "used": "已用 GPU 小时",
        "left": "剩余 GPU 小时", "lease": "租约", "task": "任务", "first": "前", "second": "后", "change": "变化",
        "runtime": "运行时长 h", "util": "GPU 利用率 %", "clock": "时钟", "ran_on": "实际卡型",
        "simulated_group": "{key}：{clock} —— 其运行时长、GPU 小时与成本为墙钟数值乘以 agent 的时间倍率",
        "util_note": "GPU 利用率 % = agent 上报值按各次上报覆盖时长加权的平均",
        "flags": "标记", "claimed": "申报（已拒收）", "flagged successes (output not counted)": "被标记的成功（产出不计入）",
        "review_by": "匹配复核（按{by}）", "reviewed": "已复核任务", "speed": "各卡型实际/预估运行时长",
        "ranking": "候选卡型排名", "chosen_mark": "（已选）", "ran_on_mark": "（实际运行）", "catalog": "卡型目录",
        "per_unit_said": "单位产出成本", "no_verdict": "尚未完成：暂无结论", "match_review": "匹配复核",
        "then": "；", "colon": "：", "profile": "负载类型",
        "flag_cleared": "任务 {task}：标记已由 {actor} 清除；账本将计入其暂不计入的产出（{units} 单位）",
        "by_card": "卡型", "by_project": "项目", "by_profile": "负载类型",
        "why_headline": "[bold]{name}[/bold]（{task}），项目 {project}：{state} —— {reason}；{gpu_hours:.4f} GPU 小时，"
                        "成本 {cost:.4f}，产出 {output}",
        "runs": "各次运行", "steps": "经过", "original": "原文：",
        "note_saved": "周期 {round}：复盘备注已存为第 {version} 版", "until_zone": "请给 --until 加上时区（Z、+08:00 等）",
        "audit verify": "审计校验", "leases in force": "生效中的租约", "quotas": "配额",
        "spend by project": "按项目的花费", "spend by card": "按卡型的花费", "audit log": "审计日志",
        "rounds": "结算周期", "totals": "合计", "by project": "按项目", "by scenario": "按场景", "by card": "按卡型",
        "chain": "哈希链", "segments": "归档分段", "completeness": "完整性", "models": "重放对比",
        "chain_holds": "{events} 个事件，完好", "chain_broken": "{events} 个事件，在 #{seq} 处断裂（原文：{detail}）",
        "segments_unchecked": "{count} 个，未检查（没有对象存储）", "segments_hold": "{count} 个，完好",
        "segments_problems": "{count} 个，{problems} 个问题", "complete": "每个已发布的事件都已归档",
        "incomplete": "{lost} 个已发布的事件不在归档中", "models_equal": "重放结果与实时状态一致",
        "models_differ": "{n} 处差异",
        "segment_problem": "[red]分段 {segment_no}：[/red]（原文：{detail}）",
        "not_archived": "[red]未归档：[/red]{type} {event_id}（{subject}），由 {schema} 于 {at} 发布",
        "not_running": "未对比（服务从未运行）：{names}",
        "first_break": "[bold red]最早破坏一致性的事件：[/bold red]#{seq} {event_id} {type} {subject}，时间 {at} —— {what}",
        "history_holds": "[green]历史记录完好[/green]", "history_broken": "[red]历史记录不完好[/red]",
        "as_of": "截至 {at}：共 {events} 个事件",
        "round_headline": "[bold]周期 {round}[/bold] {starts} – {ends}，由 {by} 结算：{note}",
        "report_at": "报告：{uri}report.html（另有 .json、.csv）", "note_version": "复盘备注第 {version} 版（{actor}）：{note}",
    },
}


def emit_json(value: Any) -> None:
    """`--json`: the API's answer as it came, indented, Chinese kept as characters."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


def table(lang: CliLang, title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table whose title and column heads are `LABELS` keys (or shown as given); None shows as –."""
    labels = LABELS[lang.value]
    shown = Table(title=labels.get(title, title), title_justify="left")
    for column in columns:
        shown.add_column(labels.get(column, column))
    for row in rows:
        shown.add_row(*("–" if cell is None else f"{cell:,.4g}" if isinstance(cell, float) else str(cell) for cell in row))
    return shown


def at_text(text: str | None) -> str:
    """An ISO time as `YYYY-MM-DD HH:MM:SS`, or – when there is none."""
    return text.replace("T", " ")[:19] if text else "–"


def reason_label(reason: str | None, lang: CliLang) -> str | None:
    """A machine reason or state, in Chinese when asked (the console's labels)."""
    if reason is None or lang is CliLang.EN:
        return reason
    from services.console.labels import REASON_LABELS_ZH, STATE_LABELS

    return REASON_LABELS_ZH.get(reason) or STATE_LABELS["zh"].get(reason) or reason

