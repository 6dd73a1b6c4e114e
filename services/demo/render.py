"""Rich renderables of the demo: the live view while tasks flow, and the closing summary.

Pure functions of a `Board` (and of the supervisor's status): no I/O, so tests can render them
into a string and read what a person would see.
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

from services.demo.board import Board, Money
from services.demo.supervisor import ChildStatus, Notice
from shared.events import TaskState
from shared.projection import TaskView

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
              *, recent: int = 14) -> RenderableType:  # fmt: skip
    """The whole live screen: header, state counts, fleet, processes, recent tasks, what happened."""
    return Group(_title(board, header), _counts(board), _processes(children), _fleet(board),
                 _recent(board.recent(recent)), _notes(header, notices))  # fmt: skip


def _title(board: Board, header: Header) -> Text:
    elapsed = time.monotonic() - header.started_at
    return Text.assemble(
        ("cardflow demo ", "bold"), f"run {header.run_id}  ·  {elapsed:4.0f}s  ·  sim time x{header.time_scale:g}  ·  ",
        (f"console {header.console_url}", "underline"), f"  ·  {board.events} events  ·  logs {header.logs}",
    )  # fmt: skip


def _counts(board: Board) -> Text:
    counts = board.counts()
    parts: list[str | tuple[str, str]] = [("tasks: ", "bold")]
    for state in TaskState:
        if counts.get(state):
            parts += [(f"{state.value} {counts[state]}", STATE_STYLES[state]), "  "]
    parts.append(f"total {sum(counts.values())}")
    return Text.assemble(*parts)


def plain_status(board: Board) -> str:
    """One line for a non-terminal output: the task counts and the GPUs leased per card type."""
    fleet = "  ".join(f"{card} {busy}/{total} GPUs leased" for card, (busy, total) in board.fleet().items())
    return f"{_counts(board).plain}  |  {fleet or 'no node registered yet'}"


def _fleet(board: Board) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_row(Text("fleet", style="bold"))
    for card, (busy, total) in board.fleet().items():
        table.add_row(f"  {card}", ProgressBar(total=max(total, 1), completed=busy, width=30), f"{busy}/{total} GPUs leased")
    if not board.fleet():
        table.add_row(Text("  no node registered yet", style="dim"))
    return table


def _processes(children: Sequence[ChildStatus]) -> Text:
    up = sum(child.running for child in children)
    parts: list[str | tuple[str, str]] = [("processes: ", "bold"), (f"{up}/{len(children)} up", "green" if up == len(children) else "yellow")]
    for child in children:
        if child.running and not child.restarts:
            continue
        if child.running:
            parts.append((f"  {child.name} up after {child.restarts} restart(s)", "yellow"))
        elif child.restart_in_s is not None:
            parts.append((f"  {child.name} exited ({child.last_exit}), restart in {child.restart_in_s:.0f}s", "yellow"))
        else:
            parts.append((f"  {child.name} exited ({child.last_exit})", "red"))
    return Text.assemble(*parts)


def _recent(views: Sequence[TaskView]) -> Table:
    table = Table(title="recent tasks", expand=True, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column, ratio in (("task", 2), ("project", 1), ("class", 1), ("card", 1), ("state", 1), ("why", 5)):
        table.add_column(column, ratio=ratio, overflow="ellipsis", no_wrap=True)
    for view in views:
        table.add_row(
            view.name or view.id, view.project or "", str(view.priority_class or ""), view.card_type or "",
            Text(view.state.value, style=STATE_STYLES[view.state]), view.reason_detail or view.reason,
        )  # fmt: skip
    return table


def _notes(header: Header, notices: Sequence[Notice]) -> RenderableType:
    lines = [Text(f"demo: {note}", style="cyan") for note in header.notes[-3:]]
    for notice in notices[-4:]:
        style = "yellow" if "exited" in notice.message else "dim"
        lines.append(Text(f"{time.strftime('%H:%M:%S', time.localtime(notice.at))} {notice.child}: {notice.message}", style=style))
    return Group(*lines)


# ---- the closing summary -------------------------------------------------------------------------


def summary(board: Board, keys: frozenset[str], *, time_scale: float = 1.0, currency: str = "USD") -> RenderableType:
    """Outcome per project with leased vs charged GPU time, then the tasks that did not run and why."""
    views = board.views_of(keys)
    return Group(_per_project(board, views, currency, time_scale), _did_not_run(board, views))


def _per_project(board: Board, views: Sequence[TaskView], currency: str, time_scale: float) -> Table:
    caption = (f"GPU time and cost are the real seconds leased; at sim time x{time_scale:g} the work simulated "
               f"{board.totals(board.leased).gpu_hours * time_scale:,.1f} GPU-hours") if time_scale != 1 else None  # fmt: skip
    table = Table(title="demo summary (ledger totals per project)", title_justify="left", caption=caption, caption_justify="left")
    for column in ("project", "tasks", "succeeded", "other", "leased GPU-h", "ledger GPU-h", f"ledger {currency}"):
        table.add_column(column, justify="left" if column == "project" else "right")
    projects = sorted({v.project or "?" for v in views} | set(board.charged))
    for project in projects:
        mine = [v for v in views if (v.project or "?") == project]
        _money_row(table, project, mine, board.leased.get(project, Money()), board.charged.get(project, Money()))
    _money_row(table, "total", list(views), board.totals(board.leased), board.totals(board.charged), style="bold")
    return table


def _money_row(table: Table, label: str, views: Sequence[TaskView], leased: Money, charged: Money, style: str = "") -> None:
    succeeded = sum(v.state is TaskState.SUCCEEDED for v in views)
    table.add_row(
        label, str(len(views)), str(succeeded), str(len(views) - succeeded),
        f"{leased.gpu_hours:.3f}", f"{charged.gpu_hours:.3f}", f"{charged.cost:.2f}", style=style,
    )  # fmt: skip


def _did_not_run(board: Board, views: Sequence[TaskView]) -> RenderableType:
    lines: list[RenderableType] = []
    rejected = [v for v in board.tasks.values() if v.state is TaskState.REJECTED]
    unsuccessful = {v.id: v for v in [*views, *rejected] if v.state is not TaskState.SUCCEEDED}
    for view in unsuccessful.values():
        lines.append(Text.assemble((view.name or f"submission {view.id}", "bold"), " ",
                                   (view.state.value, STATE_STYLES[view.state]), f": {view.reason_detail or view.reason}"))  # fmt: skip
    return Group(*lines) if lines else Text("every demo task succeeded", style="green")
