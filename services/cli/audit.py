"""`cardflow audit verify|replay|why|log`, `cardflow round close|note|list|show|compare`,
`cardflow matches TASK`, `cardflow review`, `cardflow review clear-flag TASK --reason`: thin clients
of the HTTP API (`/v1/audit/*`, `/v1/rounds*`, `/v1/matches/*`, `/v1/review*`), printing rich tables (English or `--lang zh`) or
`--json`. `audit verify` exits 0 only when every check holds (1 when one does not).
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.task_refs import TaskArgument, task_id_or_ref
from services.cli.lang import CliLang, LangOption
from services.ledger.review_reasons import Verdict, review_reason_text, verdict_label

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


def register(app: typer.Typer) -> None:
    audit = typer.Typer(help="The audit archive: verify, replay, why a task, who changed what (auditor).",
                        no_args_is_help=True)  # fmt: skip
    app.add_typer(audit, name="audit")
    for name, command in (("verify", verify), ("replay", replay), ("why", why), ("log", log)):
        audit.command(name)(command)
    rounds = typer.Typer(help="Accounting rounds: close with a note, amend it, list, show, compare.", no_args_is_help=True)
    app.add_typer(rounds, name="round")
    for name, command in (("close", close), ("note", note), ("list", list_rounds), ("show", show), ("compare", compare)):
        rounds.command(name)(command)
    app.command("matches")(matches)
    reviews = typer.Typer(help="The match review; `review clear-flag TASK --reason` clears a flagged success.",
                          invoke_without_command=True)  # fmt: skip
    app.add_typer(reviews, name="review")
    reviews.callback()(review)
    reviews.command("clear-flag")(clear_flag)


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def table(lang: CliLang, title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    labels = LABELS[lang.value]
    shown = Table(title=labels.get(title, title), title_justify="left")
    for column in columns:
        shown.add_column(labels.get(column, column))
    for row in rows:
        shown.add_row(*("–" if cell is None else f"{cell:,.4g}" if isinstance(cell, float) else str(cell) for cell in row))
    return shown


def _at(text: str | None) -> str:
    return text.replace("T", " ")[:19] if text else "–"


# ---- audit ---------------------------------------------------------------------------------------------


def verify(
    settle: Annotated[float, typer.Option("--settle", help="seconds to re-check differences while services catch up")] = 15.0,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Check the hash chain, every segment in object storage, that nothing published is missing,
    and that replaying the archive rebuilds the live state; exit 0 only when all of it holds."""
    with cli_api(lang) as api:
        report = api.get("/v1/audit/verify", settle_s=settle)
    if as_json:
        emit_json(report)
    else:
        print_verify(report, lang)
    raise typer.Exit(0 if report["ok"] else 1)


def print_verify(report: dict[str, Any], lang: CliLang) -> None:
    said = LABELS[lang.value]
    console.print(table(lang, "audit verify", ["check", "result"], _verify_rows(report, said)))
    for problem in report["segments"]["problems"]:
        console.print(said["segment_problem"].format(segment_no=problem["segment_no"], detail=problem["detail"]))
    for lost in report["lost"]:
        console.print(said["not_archived"].format(type=lost["type"], event_id=lost["event_id"], subject=lost["subject"],
                                                  schema=lost["schema"], at=_at(lost["published_at"])))  # fmt: skip
    models = report["models"]
    if models["mismatches"]:
        console.print(table(lang, "", ["model", "key", "difference", "event"],
                            [[m["model"], m["key"], m["detail"], m["event_id"]] for m in models["mismatches"][:50]]))  # fmt: skip
    if models["not_running"]:
        console.print(said["not_running"].format(names=", ".join(models["not_running"])))
    first = report["first_break"]
    if first:
        console.print(said["first_break"].format(seq=first["seq"], event_id=first["event_id"], type=first.get("type", ""),
                                                 subject=first.get("subject", ""), at=_at(first.get("occurred_at")),
                                                 what=first["what"]))  # fmt: skip
    console.print(said["history_holds"] if report["ok"] else said["history_broken"])


def _verify_rows(report: dict[str, Any], said: dict[str, str]) -> list[list[Any]]:
    """One row per check: the chain, the segments, completeness, the replayed models."""
    chain, segments, models = report["chain"], report["segments"], report["models"]
    chained = (said["chain_holds"].format(events=report["events"]) if chain is None
               else said["chain_broken"].format(events=report["events"], seq=chain["seq"], detail=chain["detail"]))  # fmt: skip
    if not segments["checked"] and segments["count"]:
        segmented = said["segments_unchecked"].format(count=segments["count"])
    elif not segments["problems"]:
        segmented = said["segments_hold"].format(count=segments["count"])
    else:
        segmented = said["segments_problems"].format(count=segments["count"], problems=len(segments["problems"]))
    complete = said["complete"] if not report["lost"] else said["incomplete"].format(lost=len(report["lost"]))
    compared = ", ".join(f"{k} {v}" for k, v in models["compared"].items())
    replayed = said["models_equal"] if not models["mismatches"] else said["models_differ"].format(n=len(models["mismatches"]))
    return [[said["chain"], chained], [said["segments"], segmented], [said["completeness"], complete],
            [said["models"], f"{replayed} ({compared})"]]  # fmt: skip


def replay(
    until: Annotated[datetime | None, typer.Option("--until", help="ISO 8601 with a time zone, e.g. 2026-03-01T12:00:00+08:00")] = None,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """The state at any moment, folded from the archive: tasks, leases in force, quotas, spend."""
    if until is not None and until.tzinfo is None:
        raise typer.BadParameter(LABELS[lang.value]["until_zone"], param_hint="--until")
    with cli_api(lang) as api:
        state = api.get("/v1/audit/replay", until=until.isoformat() if until else None)
    if as_json:
        emit_json(state)
        return
    console.print(LABELS[lang.value]["as_of"].format(at=_at(state["as_of"]), events=state["events"]))
    console.print(table(lang, "tasks", ["state", "tasks"], [[k, v] for k, v in sorted(state["task_states"].items())]))
    console.print(table(lang, "leases in force", ["lease", "task", "node", "card", "gpus", "granted"],
                        [[x["lease_id"], x["task_id"], x["node_id"], x["card_type"], ",".join(map(str, x["gpu_indices"])),
                          _at(x["granted_at"])] for x in state["active_leases"]]))  # fmt: skip
    console.print(table(lang, "quotas", ["account", "key", "gpu_hours", "used", "left"],
                        [[q["account_id"], q["project"], q["gpu_hours"], q["used_gpu_hours"], q["remaining_gpu_hours"]]
                         for q in state["quotas"]]))  # fmt: skip
    for name in ("spend_by_project", "spend_by_card"):
        console.print(table(lang, name.replace("_", " "), ["key", "gpu_hours", "cost"],
                            [[r["key"], r["gpu_hours"], r["cost"]] for r in state[name]]))  # fmt: skip


def why(task: TaskArgument, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """The whole story of a task: each step with time, actor and reason, and its runs."""
    with cli_api(lang) as api:
        task_id = task_id_or_ref(api, task)
        story = api.get(f"/v1/audit/why/{task_id}", lang=lang.value)
    if as_json:
        emit_json(story)
        return
    said = LABELS[lang.value]
    output = story["output_units"] if story["output_units"] is not None else "–"
    console.print(said["why_headline"].format(name=story["name"] or task_id, task=task_id, project=story["project"],
                                              state=reason_label(story["state"], lang), reason=reason_label(story["reason"], lang),
                                              gpu_hours=story["gpu_hours"], cost=story["cost"], output=output))  # fmt: skip
    console.print(table(lang, "runs", ["run", "node", "card", "gpus", "granted", "ended", "why_ended", "gpu_hours", "cost", "output"],
                        [[r["run"], ",".join(r["node_ids"]), r["card_type"], r["gpus"], _at(r["granted_at"]),
                          _at(r["ended_at"]), (r["end_reason_label"] or "") + (f" ({r['stopped_by']})" if r["stopped_by"] else ""),
                          r["gpu_hours"], r["cost"], r["output_units"]] for r in story["runs"]]))  # fmt: skip
    named = lang is CliLang.ZH  # English names the event in its sentence; Chinese adds a column with its name
    console.print(table(lang, "steps", ["time", "actor", "run", *(["event"] if named else []), "reason", "what"],
                        [[_at(s["at"]), s["actor"], s["run"], *([s["event_label"]] if named else []), s["reason_label"],
                          _step_text(s, lang)] for s in story["steps"]]))  # fmt: skip


def _step_text(step: dict[str, Any], lang: CliLang) -> str:
    """A step's sentence, and the English one beside it as 原文 where the Chinese leaves words out."""
    original = f"\n{LABELS[lang.value]['original']}{step['original']}" if step.get("original") else ""
    return step["sentence"] + original


def reason_label(reason: str | None, lang: CliLang) -> str | None:
    """A machine reason or state, in Chinese when asked (the console's labels)."""
    if reason is None or lang is CliLang.EN:
        return reason
    from services.console.labels import REASON_LABELS_ZH, STATE_LABELS

    return REASON_LABELS_ZH.get(reason) or STATE_LABELS["zh"].get(reason) or reason


def log(
    actor: Annotated[str | None, typer.Option("--actor", help="user:alice, or alice")] = None,
    event_type: Annotated[str | None, typer.Option("--type", help="an event type, or a prefix like quota.")] = None,
    since: Annotated[datetime | None, typer.Option("--since", help="ISO 8601 with a time zone")] = None,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Who changed what: configuration, templates, quotas, approvals, cancellations, tokens, agents, rounds."""
    with cli_api(lang) as api:
        rows = api.get("/v1/audit/log", actor=actor, type=event_type, since=since.isoformat() if since else None)
    if as_json:
        emit_json(rows)
        return
    console.print(table(lang, "audit log", ["time", "actor", "event", "subject", "what", "reason"],
                        [[_at(r["at"]), r["actor"], r["type"], r["subject"], r["what"], r["reason"]] for r in rows]))  # fmt: skip


# ---- rounds ----------------------------------------------------------------------------------------------

NoteOption = Annotated[str, typer.Option("--note", help="the one-line retrospective: which allocation was worth it")]


def close(note: NoteOption, reason: ReasonOption = "", as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Close the open round now (operator): the report goes to PostgreSQL and the reports bucket."""
    with cli_api(lang) as api:
        closed = api.post("/v1/rounds/close", {"note": note, "reason": reason})
    if as_json:
        emit_json(closed)
        return
    print_round(closed, lang)


def note(
    round_id: Annotated[str, typer.Argument(help="e.g. R0003")], text: NoteOption, reason: ReasonOption = "",
    lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Amend a round's note (operator); every earlier version is kept."""
    with cli_api(lang) as api:
        answer = api.post(f"/v1/rounds/{round_id}/note", {"note": text, "reason": reason})
    console.print(LABELS[lang.value]["note_saved"].format(round=answer["round_id"], version=answer["version"]))


def list_rounds(as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Closed rounds, oldest first."""
    with cli_api(lang) as api:
        rows = api.get("/v1/rounds")
    if as_json:
        emit_json(rows)
        return
    console.print(table(lang, "rounds", ["round", "from", "to", "gpu_hours", "cost", "output", "closed_by", "note"],
                        [[r["round_id"], _at(r["starts_at"]), _at(r["ends_at"]), r["gpu_hours"], r["cost"],
                          r["output_units"], r["closed_by"], r["note"]] for r in rows]))  # fmt: skip


def show(round_id: Annotated[str, typer.Argument(help="e.g. R0003")], as_json: JsonOption = False,
         lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """One round's report: totals, spend against output by project, scenario and card, the review."""
    with cli_api(lang) as api:
        found = api.get(f"/v1/rounds/{round_id}")
    if as_json:
        emit_json(found)
        return
    print_round(found, lang)


def print_round(found: dict[str, Any], lang: CliLang) -> None:
    report = found["report"]
    said = LABELS[lang.value]
    console.print(said["round_headline"].format(round=found["round_id"], starts=_at(found["starts_at"]), ends=_at(found["ends_at"]),
                                                by=found["closed_by"], note=found["note"]))  # fmt: skip
    if found.get("report_uri"):
        console.print(said["report_at"].format(uri=found["report_uri"]))
    console.print(table(lang, "totals", ["key", "result"], [[k, v] for k, v in report["totals"].items()]))
    for grouping in ("project", "scenario", "card"):
        console.print(table(lang, f"by {grouping}", ["key", "tasks", "gpu_hours", "cost", "output", "cost_per_unit"],
                            [[r["key"], r["tasks"], r["gpu_hours"], r["cost"], r["output_units"], r["cost_per_output_unit"]]
                             for r in report[f"by_{grouping}"]]))  # fmt: skip
    counts = report["review"]["counts"]
    console.print(LABELS[lang.value]["match_review"] + ": "
                  + ", ".join(f"{verdict_label(k, lang)} {v}" for k, v in counts.items()))  # fmt: skip
    print_flagged(report.get("flagged", []), lang)
    for version in found.get("notes", [])[1:]:
        console.print(said["note_version"].format(version=version["version"], actor=version["actor"], note=version["note"]))


def clear_flag(task: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Clear a flagged success after checking its output (reviewer of its project, not its submitter):
    the ledger then counts the held-back output, once; recorded with you as actor and the reason."""
    with cli_api(lang) as api:
        task_id = task_id_or_ref(api, task)
        answer = api.post(f"/v1/review/{task_id}/clear-flag", {"reason": reason})
    if as_json:
        emit_json(answer)
        return
    units = sum(run["output_units"] or 0 for run in answer["runs"])
    console.print(LABELS[lang.value]["flag_cleared"].format(task=task_id, actor=answer["cleared_by"], units=f"{units:g}"))


def print_flagged(flagged: list[dict[str, Any]], lang: CliLang) -> None:
    """The flagged successes (their output held back from every total), when there are any."""
    if flagged:
        title = LABELS[lang.value]["flagged successes (output not counted)"]
        console.print(table(lang, title, ["task", "flags", "output", "claimed", "what"],
                            [[f"{f['task_id']} {f['name'] or ''}".strip(), ", ".join(str(reason_label(x, lang)) for x in f["flags"]),
                              f["output_units"], f["claimed_output_units"], f["detail"]] for f in flagged]))  # fmt: skip


def compare(first: Annotated[str, typer.Argument()], second: Annotated[str, typer.Argument()],
            as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Two rounds side by side: totals, and spend per project and card type, with the change."""
    with cli_api(lang) as api:
        result = api.get("/v1/rounds/compare", first=first, second=second)
    if as_json:
        emit_json(result)
        return
    console.print(table(lang, f"{first} → {second}", ["key", "first", "second", "change"],
                        [[k, v["first"], v["second"], v["change"]] for k, v in result["totals"].items()]))  # fmt: skip
    for grouping in ("project", "card"):
        console.print(table(lang, f"cost by {grouping}", ["key", "first", "second", "change"],
                            [[k, v["cost"]["first"], v["cost"]["second"], v["cost"]["change"]]
                             for k, v in result[f"by_{grouping}"].items()]))  # fmt: skip


# ---- the match review --------------------------------------------------------------------------------------


def matches(task: TaskArgument, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """A task's card match: every ranked card type, and once it finished, the verdict in hindsight."""
    with cli_api(lang) as api:
        task_id = task_id_or_ref(api, task)
        found = api.get(f"/v1/matches/{task_id}", lang=lang.value)
    if as_json:
        emit_json(found)
        return
    reviewed = found["review"]
    hindsight = {a["card_type"]: a for a in (reviewed or {}).get("alternatives", [])}
    said = LABELS[lang.value]
    rows = [[o["card_type"] + (said["chosen_mark"] if o["card_type"] == found["chosen"] else "")
             + (said["ran_on_mark"] if reviewed and o["card_type"] == reviewed["ran_on"] else ""),
             o["est_runtime_s"] / 3600, o["est_cost"],
             hindsight[o["card_type"]]["predicted_runtime_s"] / 3600 if o["card_type"] in hindsight else None,
             hindsight[o["card_type"]]["predicted_cost"] if o["card_type"] in hindsight else None]
            for o in found["ranking"]]  # fmt: skip
    console.print(f"[bold]{found['name'] or task_id}[/bold]: {found['why']}"
                  + (f" ({said['catalog']} {found['catalog_version']})" if found["catalog_version"] else ""))  # fmt: skip
    console.print(table(lang, said["ranking"], ["card", "est_runtime", "est_cost", "hindsight_runtime", "hindsight_cost"], rows))
    if reviewed:
        per_unit = reviewed["cost_per_output_unit"]
        console.print(f"[bold]{verdict_label(reviewed['verdict'], lang)}[/bold]{said['colon']}{review_reason_text(reviewed, lang)}"
                      f"{said['then']}{said['per_unit_said']} {per_unit if per_unit is not None else '–'}")  # fmt: skip
        console.print(run_line(reviewed, lang))
    else:
        console.print(said["no_verdict"])


def clock_text(simulated: str | None, lang: CliLang) -> str:
    """"simulated ×60" (模拟 ×60) for figures from a scaled agent; "real" (真实) otherwise."""
    if simulated is None:
        return "真实" if lang is CliLang.ZH else "real"
    return simulated.replace("simulated", "模拟") if lang is CliLang.ZH else simulated


def run_line(reviewed: dict[str, Any], lang: CliLang) -> str:
    """Runtime (in the agent's time, with its clock) and the time-weighted mean GPU utilisation."""
    util, coverage = reviewed["util_pct"], reviewed["util_coverage"]
    clock = clock_text(reviewed["simulated"], lang)
    if lang is CliLang.ZH:
        busy = (f"GPU 平均利用率 {util:.0f}%（按时间加权，覆盖运行的 {coverage:.0%}）" if util is not None
                else "GPU 利用率：未上报")  # fmt: skip
        return f"运行 {reviewed['runtime_s'] / 3600:.2f} h（{clock}，墙钟 {reviewed['wall_runtime_s']:.0f} s）· {busy}"
    busy = (f"GPUs {util:.0f}% busy (time-weighted mean over {coverage:.0%} of the run)" if util is not None
            else "GPU utilisation: not reported")  # fmt: skip
    return f"ran {reviewed['runtime_s'] / 3600:.2f} h ({clock}, wall clock {reviewed['wall_runtime_s']:.0f} s) · {busy}"


class ReviewBy(StrEnum):
    card = "card"
    project = "project"
    profile = "profile"


def review(
    ctx: typer.Context,
    round_id: Annotated[str | None, typer.Option("--round", help="only tasks that finished in this round")] = None,
    by: Annotated[ReviewBy, typer.Option("--by", help="group by card type, project or profile")] = ReviewBy.card,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """Which matches were worth it: verdicts per group, cheapest output first, and the actual/estimated
    runtime per card type and profile (to correct the catalog's speed factors)."""
    if ctx.invoked_subcommand is not None:
        return
    with cli_api(lang) as api:
        result = api.get("/v1/review", round=round_id, by=by.value)
    if as_json:
        emit_json(result)
        return
    from services.console.labels import profile_label  # lazily: the CLI starts fast

    said = LABELS[lang.value]
    console.print(table(lang, said["review_by"].format(by=said.get(f"by_{by.value}", by.value)),
                        ["key", "tasks", *(verdict_label(v, lang) for v in Verdict),
                         "gpu_hours", "cost", "output", "cost_per_unit", "ratio", "util"],
                        [[profile_label(g["key"], lang.value) if by is ReviewBy.profile else g["key"], g["tasks"],
                          *(g[v.value] for v in Verdict), g["gpu_hours"],
                          g["cost"], g["output_units"], g["cost_per_output_unit"], g["mean_runtime_ratio"],
                          g["mean_util_pct"]] for g in result["groups"]]))  # fmt: skip
    for group in (g for g in result["groups"] if g["simulated"]):
        console.print(LABELS[lang.value]["simulated_group"].format(key=group["key"], clock=clock_text(group["simulated"], lang)))
    console.print(table(lang, said["reviewed"], ["task", "ran_on", "verdict", "runtime", "clock", "ratio", "util"],
                        [[t["task_id"], t["ran_on"], verdict_label(t["verdict"], lang), t["runtime_s"] / 3600,
                          clock_text(t["simulated"], lang), t["ratio"], t["util_pct"]] for t in result["tasks"]]))  # fmt: skip
    console.print(LABELS[lang.value]["util_note"])
    console.print(table(lang, said["speed"], ["card", "profile", "tasks", "ratio"],
                        [[c["card_type"], profile_label(c["profile"], lang.value), c["tasks"], c["mean_ratio"]]
                         for c in result["speed_corrections"]]))  # fmt: skip
    print_flagged(result.get("flagged", []), lang)
    for task in result["tasks"]:
        if task["verdict"] != Verdict.WORTH_IT:
            console.print(f"{task['task_id']} {task['name']}: [bold]{verdict_label(task['verdict'], lang)}[/bold]"
                          f" — {review_reason_text(task, lang)}")  # fmt: skip
