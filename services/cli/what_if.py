"""`cardflow config what-if policy FILE [--days N]`: replay the last N days under the proposal first.

Reads the policy and card catalog in force and this installation's own workload of the last N
days through the API, replays it locally in the simulator (the same `plan()` the dispatcher runs)
under both policies with a progress bar, and prints the measures side by side with a one-line
verdict. `--apply --reason TEXT` then applies FILE, based on the version that was compared.
`--lang zh` (or `CARDFLOW_LANG=zh`): the table, the verdict and the answers in Chinese, rendered from
the measures themselves; a policy's validation error stays the validator's own sentence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()
errors = Console(stderr=True, soft_wrap=True)

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "title": "what-if: policy v{version} (in force) vs proposed — last {days:g} days, {tasks} tasks, {fleet}",
        "measure": "measure", "in force": "in force", "proposed": "proposed", "change": "change",
        "not_replayed": "Not replayed: {said} (docs/config.md#what-if).", "left_out": "{count} {why}",
        "nothing": "nothing to replay: {tasks} task(s) and {nodes} node(s) in the last {days:g} days",
        "only_policy": "what-if replays policies only: use `policy`", "needs_reason": "--apply needs --reason",
        "replaying": "replaying under the {label} policy", "current": "current", "error": "error:", "sep": ", ",
    },
    CliLang.ZH: {
        "title": "what-if：现行策略 v{version} 与提议策略 —— 最近 {days:g} 天，{tasks} 个任务，{fleet}",
        "measure": "指标", "in force": "现行", "proposed": "提议", "change": "变化",
        "not_replayed": "未重放：{said}（docs/config.md#what-if）。", "left_out": "{why} {count} 个",
        "nothing": "没有可重放的：最近 {days:g} 天只有 {tasks} 个任务、{nodes} 个节点",
        "only_policy": "what-if 只能重放策略：请用 `policy`", "needs_reason": "--apply 需要 --reason",
        "replaying": "按{label}策略重放", "current": "现行", "error": "错误：", "sep": "，",
    },
}  # fmt: skip
"""The what-if command's words per language (the English verdict is `shared.config.what_if.verdict`'s)."""

VERDICT_ZH = {
    "same": "没有差异：在最近 {days:g} 天（{tasks} 个任务）里，提议的策略会做出与现行策略相同的决定。",
    "changed": "在最近 {days:g} 天（{tasks} 个任务）里，提议的策略{parts}。", "better": "更好：{listed}",
    "worse": "更差：{listed}", "then": "；", "and": "，",
}
MEASURES_ZH = {"utilisation": "利用率", "cost": "成本", "preemptions": "抢占次数", "lost GPU-hours": "损失的 GPU 小时",
               "completed": "完成任务数", "mean": "均值", "p95": "p95", "wait": "等待时间", "deferred": "推迟"}
UNITS_ZH = {"min": " 分钟", "h": " 小时", "%": "%", "": "", "tasks": " 个"}
LEFT_OUT_ZH = {"cancelled before it ran": "运行前已取消", "unmatchable, never ran": "无可用卡型，从未运行",
               "data not ready, never ran": "数据未就绪，从未运行"}  # services/config/workload.py's reasons


def what_if(
    name: Annotated[str, typer.Argument(help="the document to try: policy")],
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the proposed policy (YAML)")],
    days: Annotated[float, typer.Option("--days", min=0.01, max=90, help="replay this many days of history")] = 7.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    apply_it: Annotated[bool, typer.Option("--apply", help="apply FILE afterwards (needs --reason)")] = False,
    reason: Annotated[str, typer.Option("--reason", help="why; required with --apply")] = "",
    lang: LangOption = CliLang.EN,
) -> None:
    """Replay this installation's last N days under the policy in force and under FILE; show the deltas."""
    from shared.config import POLICY, DocumentInvalid, catalog_of, parse_document_name, scheduling_policy
    from shared.config import strip_version_header, validate_document
    from shared.config.what_if import compare, verdict, workload_tasks

    words = WORDS[lang]
    if parse_document_name(name) != POLICY:
        raise typer.BadParameter(words["only_policy"], param_hint="NAME")
    if apply_it and not reason:
        raise typer.BadParameter(words["needs_reason"], param_hint="--reason")
    text, _ = strip_version_header(file.read_text(encoding="utf-8"))
    try:
        proposal = validate_document(POLICY, text).model
    except DocumentInvalid as invalid:
        from rich.markup import escape

        errors.print(f"[red]{words['error']}[/red] {escape(str(invalid))}")
        raise typer.Exit(1) from None
    with cli_api(lang) as api:
        current_doc = api.get("/v1/config/show", name="policy")
        cards = api.get("/v1/config/show", name="cards")
        workload = api.get("/v1/workload", days=days)
    catalog = catalog_of(validate_document(parse_document_name("cards"), cards["content"]).model, cards["version"])
    current = scheduling_policy(validate_document(POLICY, current_doc["content"]).model, name=f"policy v{current_doc['version']}")
    tasks, fleet = workload_tasks(workload, catalog)
    if not tasks or not fleet.nodes:
        errors.print(words["nothing"].format(tasks=len(tasks), nodes=len(fleet.nodes), days=days))
        raise typer.Exit(1)
    summaries = _replay_both(tasks, fleet, {"current": current, "proposed": scheduling_policy(proposal, name="proposed")},
                             catalog, words)  # fmt: skip
    rows = compare(summaries["current"], summaries["proposed"])
    sentence = verdict(rows, days, len(tasks)) if lang is CliLang.EN else verdict_zh(rows, days, len(tasks))
    left_out = workload.get("left_out") or {}
    if as_json:
        print(json.dumps({"days": days, "tasks": len(tasks), "left_out": left_out, "current_version": current_doc["version"],
                          "measures": [_row_json(r) for r in rows], "verdict": sentence,
                          "current": summaries["current"], "proposed": summaries["proposed"]}, indent=2, default=str,
                         ensure_ascii=False))  # fmt: skip
    else:
        console.print(_table(rows, current_doc["version"], days, len(tasks), fleet.summary(), lang))
        if left_out:
            said = words["sep"].join(words["left_out"].format(count=count, why=_left_out(why, lang))
                                     for why, count in sorted(left_out.items()))  # fmt: skip
            console.print(words["not_replayed"].format(said=said), style="dim")
        console.print(f"[bold]{sentence}[/bold]")
    if apply_it:
        from services.cli.config_commands import print_change

        with cli_api(lang) as api:
            answer = api.post("/v1/config/apply", {"name": "policy", "content": text, "base": current_doc["version"],
                                                   "reason": reason})
        print_change(answer, lang)


def verdict_zh(rows: list[Any], days: float, tasks: int) -> str:
    """`verdict` in Chinese, from the same measures (`gains_and_losses`)."""
    from shared.config.what_if import gains_and_losses

    better, worse = gains_and_losses(rows)
    if not better and not worse:
        return VERDICT_ZH["same"].format(days=days, tasks=tasks)
    parts = [VERDICT_ZH[side].format(listed=VERDICT_ZH["and"].join(_phrase_zh(row) for row in said))
             for side, said in (("better", better), ("worse", worse)) if said]  # fmt: skip
    return VERDICT_ZH["changed"].format(days=days, tasks=tasks, parts=VERDICT_ZH["then"].join(parts))


def _phrase_zh(row: Any) -> str:
    unit = UNITS_ZH.get(row.unit, f" {row.unit}")
    return f"{measure_label(row.measure, CliLang.ZH)} {row.current:.3g}{unit} → {row.proposed:.3g}{unit}"


def measure_label(measure: str, lang: CliLang) -> str:
    """A measure's name as said: `wait core p95` → 等待时间 核心 p95, `deferred: quota_exhausted` → 推迟：配额不足."""
    if lang is CliLang.EN:
        return measure
    from services.console.labels import GPU_STATUS_LABELS, reason_label

    if measure.startswith("deferred: "):
        return f"{MEASURES_ZH['deferred']}：{reason_label(measure.removeprefix('deferred: '), 'zh')}"
    if measure.startswith("wait "):
        _, name, stat = measure.split()
        return f"{MEASURES_ZH['wait']} {GPU_STATUS_LABELS['zh'].get(name, name)} {MEASURES_ZH.get(stat, stat)}"
    return MEASURES_ZH.get(measure, measure)


def _left_out(why: str, lang: CliLang) -> str:
    """Why tasks were not replayed, as said (an unknown reason in English, marked 原文)."""
    if lang is CliLang.EN:
        return why
    return LEFT_OUT_ZH.get(why, f"{why}（原文）")


def _replay_both(tasks: list[Any], fleet: Any, policies: dict[str, Any], catalog: Any,
                 words: dict[str, str]) -> dict[str, dict[str, Any]]:  # fmt: skip
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from shared.config.what_if import replay

    summaries = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=errors, transient=True) as progress:  # fmt: skip
        for label, policy in policies.items():
            bar = progress.add_task(words["replaying"].format(label=words[label]), total=len(tasks))
            summaries[label] = replay(tasks, fleet, policy, catalog, lambda done, _now, bar=bar: progress.update(bar, completed=done))
            progress.update(bar, completed=len(tasks))
    return summaries


def _row_json(row: Any) -> dict[str, Any]:
    return {"measure": row.measure, "current": row.current, "proposed": row.proposed, "change": row.change,
            "unit": row.unit, "better": row.better}  # fmt: skip


def _table(rows: list[Any], version: int, days: float, tasks: int, fleet: str, lang: CliLang = CliLang.EN) -> Table:
    words = WORDS[lang]
    table = Table(title=words["title"].format(version=version, days=days, tasks=tasks, fleet=fleet))
    for column in ("measure", "in force", "proposed", "change"):
        table.add_column(words[column], justify="left" if column == "measure" else "right")
    for row in rows:
        style = "" if row.better is None else ("green" if row.better else "red")
        change = "=" if row.better is None else f"{row.change:+.3g}"
        unit = row.unit if row.unit != "tasks" else ""
        table.add_row(measure_label(row.measure, lang), f"{row.current:.3g} {unit}".strip(), f"{row.proposed:.3g} {unit}".strip(),
                      f"[{style}]{change}[/{style}]" if style else change)  # fmt: skip
    return table
