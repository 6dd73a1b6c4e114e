"""`cardflow approve|deny TASK --reason R [--json] [--lang zh]`: a reviewer's decision;
`cardflow approvals [--days N] [--json] [--lang zh]`: what waits for a reviewer and what was decided.

API clients of `POST /v1/tasks/{id}/approve|deny` (role reviewer, a listed reviewer of the task's
project, never its submitter). The dispatcher carries the decision out (`task.approved`, or
`task.denied` and `task.cancelled`); `cardflow status TASK` shows it. `approvals` reads
`GET /v1/board/groups` (the `approval` group) and `GET /v1/approvals/decisions` (any token).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption
from services.cli.task_refs import TaskArgument, task_id_of

console = Console()

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded with the decision")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


def register(app: typer.Typer) -> None:
    app.command("approve")(approve)
    app.command("deny")(deny)
    app.command("approvals")(approvals)


DECIDED: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"approve": "task {task} approved by {reviewer} (the dispatcher carries it out within a cycle)",
                 "deny": "task {task} denied by {reviewer} (the dispatcher carries it out within a cycle)"},
    CliLang.ZH: {"approve": "任务 {task} 已由 {reviewer} 批准（调度器会在一个周期内执行）",
                 "deny": "任务 {task} 已由 {reviewer} 拒绝（调度器会在一个周期内执行）"},
}


def approve(task_id: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Approve a task that waits for approval (reviewer): it may start."""
    _review(task_id, "approve", reason, as_json, lang)


def deny(task_id: TaskArgument, reason: ReasonOption, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Deny a task that waits for approval (reviewer): it will not run."""
    _review(task_id, "deny", reason, as_json, lang)


def _review(ref: str, decision: str, reason: str, as_json: bool, lang: CliLang) -> None:
    with cli_api(lang) as api:
        task_id = task_id_of(api, ref)
        answer = api.post(f"/v1/tasks/{task_id}/{decision}", {"reason": reason})
    if as_json:
        print(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    console.print(DECIDED[lang][decision].format(task=task_id, reviewer=answer["reviewer"]))


APPROVALS_WORDS = {
    CliLang.EN: {"waiting": "waiting for a reviewer: {n}", "decided": "decided in the last {days} days: {n}",
                 "task": "task", "project": "project", "gpus": "GPUs", "why": "why it waits", "decision": "decision",
                 "reviewer": "reviewer", "at": "decided at", "reason": "reason", "approve": "approved", "deny": "denied"},
    CliLang.ZH: {"waiting": "等待审批：{n} 个", "decided": "近 {days} 天的审批决定：{n} 个", "task": "任务", "project": "项目",
                 "gpus": "GPU 数", "why": "等待原因", "decision": "决定", "reviewer": "审批人", "at": "决定时间",
                 "reason": "理由", "approve": "已批准", "deny": "已拒绝"},
}  # fmt: skip


def approvals(
    days: Annotated[int, typer.Option("--days", min=1, max=366, help="decisions of the last N days")] = 7,
    as_json: JsonOption = False, lang: LangOption = CliLang.EN,
) -> None:  # fmt: skip
    """What waits for a reviewer, and who approved or denied what (and why) in the last N days."""
    with cli_api(lang) as api:
        board = api.get("/v1/board/groups", lang=lang.value)
        decided = api.get("/v1/approvals/decisions", days=days)
    waiting = next((group["tasks"] for group in board["groups"] if group["kind"] == "approval"), [])
    if as_json:
        print(json.dumps({"waiting": waiting, "decided": decided}, indent=2, ensure_ascii=False))
        return
    words = APPROVALS_WORDS[lang]
    console.print(waiting_table(waiting, words))
    console.print(decided_table(decided, days, words))


def waiting_table(waiting: list[dict[str, Any]], words: dict[str, str]) -> Table:
    table = Table(title=words["waiting"].format(n=len(waiting)), title_justify="left")
    for column in ("task", "project", "gpus", "why"):
        table.add_column(words[column], overflow="fold")
    for task in waiting:
        table.add_row(task["name"] or task["id"], task["project"] or "", str(task["gpus"] or ""), task["sentence"] or "")
    return table


def decided_table(decided: list[dict[str, Any]], days: int, words: dict[str, str]) -> Table:
    table = Table(title=words["decided"].format(days=days, n=len(decided)), title_justify="left")
    for column in ("task", "project", "decision", "reviewer", "at", "reason"):
        table.add_column(words[column], overflow="fold")
    for row in decided:
        table.add_row(row["name"] or row["task_id"], row["project"] or "", words[row["decision"]], row["reviewer"],
                      row["decided_at"][:19].replace("T", " "), row["reason"])  # fmt: skip
    return table
