"""Present simulation results: the side-by-side rich table, the JSON document and the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from rich.table import Table

from shared.simulation.engine import Outcome
from shared.simulation.metrics import step_series, window, working_series

CLASSES = ("core", "standard", "opportunistic")

LABELS: dict[str, dict[str, str]] = {
    "en": {
        "utilisation": "utilisation (bound)", "util_queued": "utilisation while ready tasks queued",
        "wait": "wait {cls} mean / p95", "wait_p99": "wait {cls} p99", "after_ready": "after data ready: {cls} p95",
        "jct": "jct mean / p95", "makespan": "makespan", "cost": "cost", "preemptions": "preemptions (lost GPU-h)",
        "idle": "idle for data (GPU-h)", "quota": "quota cut-offs", "completed": "completed / unfinished",
        "deadlines": "deadlines met / missed", "deferrals": "top deferrals (tasks)", "metric": "metric",
        "core": "core", "standard": "standard", "opportunistic": "opportunistic",
        "missed": "{policy}: {n} missed their deadline: {shown}{more}", "never": "{task} (never finished)",
        "late": "{task} ({late} late)", "more": " and {n} more", "sep": ", ", "title": "{trace} on {cluster}",
    },
    "zh": {
        "utilisation": "利用率（上限）", "util_queued": "有就绪任务排队时的利用率",
        "wait": "等待 {cls} 均值 / p95", "wait_p99": "等待 {cls} p99", "after_ready": "数据就绪后等待 {cls} p95",
        "jct": "完成时长 均值 / p95", "makespan": "总时长", "cost": "成本", "preemptions": "抢占次数（损失 GPU 小时）",
        "idle": "等数据空闲（GPU 小时）", "quota": "配额截断", "completed": "完成 / 未完成",
        "deadlines": "截止时间 达成 / 错过", "deferrals": "主要推迟原因（任务数）", "metric": "指标",
        "core": "核心", "standard": "标准", "opportunistic": "机会型",
        "missed": "{policy}：{n} 个任务错过截止时间：{shown}{more}", "never": "{task}（从未完成）",
        "late": "{task}（晚了 {late}）", "more": " 等另外 {n} 个", "sep": "，", "title": "{trace}，集群 {cluster}",
    },
}  # fmt: skip
"""The table's and the missed-deadline lines' words, in English (the default) and Chinese (`cardflow simulate --lang zh`)."""


def fmt_duration(seconds: float) -> str:
    """Short human duration: 42s, 12.5m, 3.1h, 2.4d."""
    for limit, unit, size in ((120, "s", 1), (7200, "m", 60), (172800, "h", 3600)):
        if abs(seconds) < limit:
            return f"{seconds / size:.0f}{unit}" if unit == "s" else f"{seconds / size:.1f}{unit}"
    return f"{seconds / 86400:.1f}d"


def _wait_cell(result: Mapping[str, Any], klass: str, stat: str, key: str = "wait_s") -> str:
    block = result.get(key, {}).get(klass)
    return fmt_duration(block[stat]) if block and block.get("count") else "-"


def _rows(result: Mapping[str, Any], lang: str = "en") -> list[tuple[str, str]]:
    said = LABELS[lang]
    deferrals = sorted(result["deferrals"].items(), key=lambda item: -item[1])[:3]
    rows = [
        (said["utilisation"], f"{result['utilisation']:.1%} ({result['bound']:.1%})"),
        (said["util_queued"], f"{result.get('utilisation_when_queued', 0.0):.1%}"),
        *[(said["wait"].format(cls=said[k]), f"{_wait_cell(result, k, 'mean')} / {_wait_cell(result, k, 'p95')}")
          for k in CLASSES],
        (said["wait_p99"].format(cls=said["core"]), _wait_cell(result, "core", "p99")),
        *[(said["after_ready"].format(cls=said[k]), _wait_cell(result, k, "p95", "wait_after_ready_s")) for k in CLASSES],
        (said["jct"], f"{fmt_duration(result['jct_s']['mean'])} / {fmt_duration(result['jct_s']['p95'])}"),
        (said["makespan"], fmt_duration(result["makespan_s"])),
        (said["cost"], f"{result['cost']:,.0f}"),
        (said["preemptions"], f"{result['preemptions']} ({result['lost_gpu_hours']:,.1f})"),
        (said["idle"], f"{result.get('idle_gpu_hours', 0.0):,.1f}"),
        (said["quota"], str(result["quota_cutoffs"])),
        (said["completed"], f"{result.get('completed', '?')} / {result.get('unfinished', '?')}"),
        (said["deadlines"], _deadline_cell(result.get("deadlines"))),
        (said["deferrals"], ", ".join(f"{name} {count}" for name, count in deferrals) or "-"),
    ]
    return rows


def _deadline_cell(deadlines: Mapping[str, Any] | None) -> str:
    if not deadlines or not deadlines.get("with_deadline"):
        return "-"
    return f"{deadlines['with_deadline'] - deadlines['missed']} / {deadlines['missed']}"


def missed_deadline_lines(document: Mapping[str, Any], limit: int = 10, lang: str = "en") -> list[str]:
    """Per policy, the tasks that missed their deadline (the latest first, at most `limit` each)."""
    said = LABELS[lang]
    lines = []
    for name, result in document["policies"].items():
        missed = (result.get("deadlines") or {}).get("missed_tasks") or []
        if not missed:
            continue
        shown = said["sep"].join(
            said["never"].format(task=row["task_id"]) if row["finished_s"] is None
            else said["late"].format(task=row["task_id"], late=fmt_duration(row["late_s"]))
            for row in missed[:limit]
        )
        more = said["more"].format(n=len(missed) - limit) if len(missed) > limit else ""
        lines.append(said["missed"].format(policy=name, n=len(missed), shown=shown, more=more))
    return lines


def comparison_table(document: Mapping[str, Any], title: str | None = None, lang: str = "en") -> Table:
    """Metrics as rows, policies as columns."""
    policies = document["policies"]
    table = Table(title=title or LABELS[lang]["title"].format(trace=document["trace"], cluster=document["cluster"]),
                  title_justify="left")  # fmt: skip
    table.add_column(LABELS[lang]["metric"], style="bold")
    for name in policies:
        table.add_column(name, justify="right")
    per_policy = [_rows(result, lang) for result in policies.values()]
    for index, (label, _) in enumerate(per_policy[0] if per_policy else []):
        table.add_row(label, *[rows[index][1] for rows in per_policy])
    return table


def markdown_table(document: Mapping[str, Any]) -> str:
    """The same comparison as a Markdown table (for docs/BENCHMARKS.md)."""
    policies = document["policies"]
    per_policy = [_rows(result) for result in policies.values()]
    lines = ["| metric | " + " | ".join(policies) + " |", "|---|" + "---:|" * len(policies)]
    for index, (label, _) in enumerate(per_policy[0] if per_policy else []):
        lines.append(f"| {label} | " + " | ".join(rows[index][1] for rows in per_policy) + " |")
    return "\n".join(lines)


def write_json(document: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def _finish_quantile(outcome: Outcome, start: float, share: float) -> float:
    """When `share` of the completed tasks had finished (the plot stops there: long tails hide the rest)."""
    submit = {task.task_id: task.submit_s for task in outcome.tasks}
    finishes = [submit[task_id] + jct for task_id, jct in outcome.recorder.jcts.items()]
    return float(np.quantile(finishes, share)) if finishes else start


def plot(outcomes: Mapping[str, Outcome], capacity: int, path: Path, title: str = "", bins: int = 240) -> None:
    """Utilisation (useful work / capacity) and queue length over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = next(iter(outcomes.values()))
    start, window_end = window(first.tasks)
    end = max(window_end, max(_finish_quantile(o, start, 0.95) for o in outcomes.values()))
    edges = np.linspace(start, max(end, start + 1.0), bins + 1)
    hours = (edges[:-1] + edges[1:]) / 2.0 - start
    scale, unit = (86400.0, "days") if end - start > 4 * 86400 else (3600.0, "hours")
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6), constrained_layout=True)
    for name, outcome in outcomes.items():
        top.plot(hours / scale, working_series(outcome.recorder, edges) / capacity, label=name, linewidth=1)
        queue = [(t, float(n)) for t, n, _ in outcome.recorder.queue]
        bottom.plot(hours / scale, step_series(queue, edges), label=name, linewidth=1)
    top.set_ylabel("utilisation (useful work)")
    top.set_ylim(0, 1.05)
    bottom.set_ylabel("queued tasks")
    bottom.set_xlabel(f"{unit} since first submission (until 95% of tasks have finished)")
    top.legend(loc="lower right", fontsize="small")
    top.set_title(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
