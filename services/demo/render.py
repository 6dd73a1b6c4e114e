"""Rich renderables of the demo: the live view while tasks flow, and the closing summary.

Pure functions of a `Board` (and of the supervisor's status): no I/O, so tests can render them
into a string and read what a person would see. Every word comes from `DEMO_WORDS` in the chosen
language (`cardflow up --demo --lang zh`); states and reasons are the console's labels.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from services.cli.lang import CliLang
from services.console.labels import reason_in_chinese, state_label
from services.demo.board import Board, Money
from services.demo.supervisor import ChildStatus, Notice
from shared.events import TaskState
from shared.task_view import TaskView

DEMO_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "title": "cardflow demo ", "run": "run {run_id}  ·  {elapsed:4.0f}s  ·  sim time x{scale:g}  ·  ",
        "console": "console {url}", "events": "  ·  {events} events  ·  logs {logs}",
        "tasks": "tasks: ", "total": "total {n}", "fleet": "fleet", "leased": "{busy}/{total} GPUs leased",
        "no_node": "no node registered yet", "processes": "processes: ", "up": "{up}/{n} up",
        "restarted": "  {name} up after {restarts} restart(s)", "restart_in": "  {name} exited ({code}), restart in {s:.0f}s",
        "exited": "  {name} exited ({code})", "recent": "recent tasks", "task": "task", "project": "project",
        "class": "class", "card": "card", "state": "state", "why": "why", "demo_note": "demo: {note}",
        "caption": "GPU time and cost are the real seconds leased; at sim time x{scale:g} the work simulated "
                   "{hours:,.1f} GPU-hours",
        "summary": "demo summary (ledger totals per project)", "tasks_col": "tasks", "succeeded": "succeeded",
        "other": "other", "leased_h": "leased GPU-h", "ledger_h": "ledger GPU-h", "ledger_cost": "ledger {currency}",
        "all_total": "total", "submission": "submission {id}", "all_succeeded": "every demo task succeeded",
        "submitted": "submitted {n} tasks through cf:ingest",
        "not_settled": "the demo did not settle within {s:.0f}s; see the logs in {logs}",
        "settled": "demo settled after {s:.0f}s", "keeps_running": "(sim time x{scale:g}). The system keeps running; press Ctrl-C to stop.",
        "console_line": "Console: {url}",
        "no_reviewer": "no demo reviewer ({error}): its tasks will wait for approval",
    },
    CliLang.ZH: {
        "title": "cardflow 演示 ", "run": "运行 {run_id}  ·  {elapsed:4.0f} 秒  ·  模拟时间 x{scale:g}  ·  ",
        "console": "控制台 {url}", "events": "  ·  {events} 个事件  ·  日志 {logs}",
        "tasks": "任务：", "total": "共 {n}", "fleet": "集群", "leased": "已租出 {busy}/{total} 块 GPU",
        "no_node": "尚无节点注册", "processes": "进程：", "up": "{up}/{n} 运行中",
        "restarted": "  {name} 重启 {restarts} 次后运行中", "restart_in": "  {name} 已退出（{code}），{s:.0f} 秒后重启",
        "exited": "  {name} 已退出（{code}）", "recent": "最近的任务", "task": "任务", "project": "项目",
        "class": "类别", "card": "卡型", "state": "状态", "why": "原因", "demo_note": "演示：{note}",
        "caption": "GPU 时间和费用按实际租用的秒数计；在模拟时间 x{scale:g} 下，这些工作相当于 {hours:,.1f} GPU 小时",
        "summary": "演示汇总（按项目的账本合计）", "tasks_col": "任务数", "succeeded": "成功",
        "other": "其他", "leased_h": "租用 GPU 小时", "ledger_h": "账本 GPU 小时", "ledger_cost": "账本 {currency}",
        "all_total": "合计", "submission": "提交 {id}", "all_succeeded": "所有演示任务均已成功",
        "submitted": "已通过 cf:ingest 提交 {n} 个任务",
        "not_settled": "演示在 {s:.0f} 秒内未结束；日志见 {logs}",
        "settled": "演示在 {s:.0f} 秒后结束", "keeps_running": "（模拟时间 x{scale:g}）。系统继续运行；按 Ctrl-C 停止。",
        "console_line": "控制台：{url}",
        "no_reviewer": "没有演示审批人（{error}）：需审批的任务将一直等待审批",
    },
}  # fmt: skip
"""The demo's words per language (same keys in both: tests/unit/test_cli_words.py)."""

STATE_STYLES: dict[TaskState, str] = {
    TaskState.SUBMITTED: "white",
    TaskState.WAITING_DATA: "yellow",
    TaskState.UNMATCHABLE: "magenta",
    TaskState.QUEUED: "cyan",
    TaskState.HELD: "yellow",
    TaskState.LEASED: "blue",
    TaskState.RUNNING: "bold blue",
    TaskState.SUCCEEDED: "green",
    TaskState.FAILED: "red",
    TaskState.CANCELLED: "dim",
    TaskState.REJECTED: "red",
}


@dataclass(frozen=True)
class Header:
    """What the view says about the run itself."""

    run_id: str
    time_scale: float
    console_url: str
    started_at: float  # time.monotonic()
    logs: str
    notes: tuple[str, ...] = ()  # what the demo did (uploads, data.ready), newest last


def live_view(board: Board, header: Header, children: Sequence[ChildStatus], notices: Sequence[Notice],
              *, recent: int = 14, lang: CliLang = CliLang.EN) -> RenderableType:  # fmt: skip
    """The whole live screen: header, state counts, fleet, processes, recent tasks, what happened."""
    words = DEMO_WORDS[lang]
    return Group(_title(board, header, words), _counts(board, lang), _processes(children, words), _fleet(board, words),
                 _recent(board.recent(recent), lang), _notes(header, notices, words, lang))  # fmt: skip


def _title(board: Board, header: Header, words: dict[str, str]) -> Text:
    elapsed = time.monotonic() - header.started_at
    return Text.assemble(
        (words["title"], "bold"), words["run"].format(run_id=header.run_id, elapsed=elapsed, scale=header.time_scale),
        (words["console"].format(url=header.console_url), "underline"),
        words["events"].format(events=board.events, logs=header.logs),
    )  # fmt: skip


def _counts(board: Board, lang: CliLang) -> Text:
    counts = board.counts()
    parts: list[str | tuple[str, str]] = [(DEMO_WORDS[lang]["tasks"], "bold")]
    for state in TaskState:
        if counts.get(state):
            parts += [(f"{_state_word(state, lang)} {counts[state]}", STATE_STYLES[state]), "  "]
    parts.append(DEMO_WORDS[lang]["total"].format(n=sum(counts.values())))
    return Text.assemble(*parts)


def plain_status(board: Board, lang: CliLang = CliLang.EN) -> str:
    """One line for a non-terminal output: the task counts and the GPUs leased per card type."""
    words = DEMO_WORDS[lang]
    fleet = "  ".join(f"{card} {words['leased'].format(busy=busy, total=total)}" for card, (busy, total) in board.fleet().items())
    return f"{_counts(board, lang).plain}  |  {fleet or words['no_node']}"


def _fleet(board: Board, words: dict[str, str]) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_row(Text(words["fleet"], style="bold"))
    for card, (busy, total) in board.fleet().items():
        table.add_row(f"  {card}", ProgressBar(total=max(total, 1), completed=busy, width=30),
                      words["leased"].format(busy=busy, total=total))  # fmt: skip
    if not board.fleet():
        table.add_row(Text(f"  {words['no_node']}", style="dim"))
    return table


def _processes(children: Sequence[ChildStatus], words: dict[str, str]) -> Text:
    up = sum(child.running for child in children)
    parts: list[str | tuple[str, str]] = [(words["processes"], "bold"),
                                          (words["up"].format(up=up, n=len(children)), "green" if up == len(children) else "yellow")]  # fmt: skip
    for child in children:
        if child.running and not child.restarts:
            continue
        if child.running:
            parts.append((words["restarted"].format(name=child.name, restarts=child.restarts), "yellow"))
        elif child.restart_in_s is not None:
            parts.append((words["restart_in"].format(name=child.name, code=child.last_exit, s=child.restart_in_s), "yellow"))
        else:
            parts.append((words["exited"].format(name=child.name, code=child.last_exit), "red"))
    return Text.assemble(*parts)


def _recent(views: Sequence[TaskView], lang: CliLang) -> Table:
    words = DEMO_WORDS[lang]
    table = Table(title=words["recent"], expand=True, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column, ratio in (("task", 2), ("project", 1), ("class", 1), ("card", 1), ("state", 1), ("why", 5)):
        table.add_column(words[column], ratio=ratio, overflow="ellipsis", no_wrap=True)
    for view in views:
        table.add_row(
            view.name or view.id, view.project or "", str(view.priority_class or ""), view.card_type or "",
            Text(_state_word(view.state, lang), style=STATE_STYLES[view.state]), _why(view, lang),
        )  # fmt: skip
    return table


def _state_word(state: TaskState, lang: CliLang) -> str:
    """English: the state's value, as the events and the API name it; Chinese: the console's label."""
    return state.value if lang is CliLang.EN else state_label(state, lang.value)


def _why(view: TaskView, lang: CliLang) -> str:
    """English: the detail sentence (or the reason); Chinese: the reason's name, then the detail marked 原文."""
    if lang is CliLang.EN or not view.reason:
        return view.reason_detail or view.reason
    return reason_in_chinese(view.reason, view.reason_detail)


def _notes(header: Header, notices: Sequence[Notice], words: dict[str, str], lang: CliLang) -> RenderableType:
    lines = [Text(words["demo_note"].format(note=note), style="cyan") for note in header.notes[-3:]]
    for notice in notices[-4:]:
        style = "yellow" if notice.is_exit else "dim"
        lines.append(Text(f"{time.strftime('%H:%M:%S', time.localtime(notice.at))} {notice.child}: {notice.text(lang)}", style=style))
    return Group(*lines)


# ---- the closing summary -------------------------------------------------------------------------


def summary(board: Board, keys: frozenset[str], *, time_scale: float = 1.0, currency: str = "USD",
            lang: CliLang = CliLang.EN) -> RenderableType:  # fmt: skip
    """Outcome per project with leased vs charged GPU time, then the tasks that did not run and why."""
    views = board.views_of(keys)
    return Group(_per_project(board, views, currency, time_scale, DEMO_WORDS[lang]), _did_not_run(board, views, lang))


def _per_project(board: Board, views: Sequence[TaskView], currency: str, time_scale: float, words: dict[str, str]) -> Table:
    hours = board.totals(board.leased).gpu_hours * time_scale
    caption = words["caption"].format(scale=time_scale, hours=hours) if time_scale != 1 else None
    table = Table(title=words["summary"], title_justify="left", caption=caption, caption_justify="left")
    for key in ("project", "tasks_col", "succeeded", "other", "leased_h", "ledger_h", "ledger_cost"):
        table.add_column(words[key].format(currency=currency), justify="left" if key == "project" else "right")
    projects = sorted({v.project or "?" for v in views} | set(board.charged))
    for project in projects:
        mine = [v for v in views if (v.project or "?") == project]
        _money_row(table, project, mine, board.leased.get(project, Money()), board.charged.get(project, Money()))
    _money_row(table, words["all_total"], list(views), board.totals(board.leased), board.totals(board.charged), style="bold")
    return table


def _money_row(table: Table, label: str, views: Sequence[TaskView], leased: Money, charged: Money, style: str = "") -> None:
    succeeded = sum(v.state is TaskState.SUCCEEDED for v in views)
    table.add_row(
        label, str(len(views)), str(succeeded), str(len(views) - succeeded),
        f"{leased.gpu_hours:.3f}", f"{charged.gpu_hours:.3f}", f"{charged.cost:.2f}", style=style,
    )  # fmt: skip


def _did_not_run(board: Board, views: Sequence[TaskView], lang: CliLang) -> RenderableType:
    words = DEMO_WORDS[lang]
    lines: list[RenderableType] = []
    rejected = [v for v in board.tasks.values() if v.state is TaskState.REJECTED]
    unsuccessful = {v.id: v for v in [*views, *rejected] if v.state is not TaskState.SUCCEEDED}
    for view in unsuccessful.values():
        lines.append(Text.assemble((view.name or words["submission"].format(id=view.id), "bold"), " ",
                                   (_state_word(view.state, lang), STATE_STYLES[view.state]), f": {_why(view, lang)}"))  # fmt: skip
    return Group(*lines) if lines else Text(words["all_succeeded"], style="green")
