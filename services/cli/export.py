"""`cardflow export --reason TEXT` / `cardflow export --list`: the task list and demand plan into the reports bucket, and what exists.

`--lang zh` (or `CARDFLOW_LANG=zh`): the table and the CLI's own refusal in Chinese (the words of the console's exports page).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"title": "{what} ({n}) in bucket {bucket}", "exports": "exports", "written": "written", "day": "day",
                 "at": "at", "trigger": "trigger", "actor": "actor", "reason": "reason", "tasks": "tasks",
                 "objects": "objects (key @ version)", "daily": "daily", "manual": "manual",
                 "needs_reason": "an export is recorded with who and why: add --reason TEXT"},
    CliLang.ZH: {"title": "{what}（{n} 个），存储桶 {bucket}", "exports": "已有导出", "written": "已导出", "day": "日期",
                 "at": "时间", "trigger": "触发", "actor": "操作者", "reason": "原因", "tasks": "任务数",
                 "objects": "对象（键 @ 版本）", "daily": "每日", "manual": "手动",
                 "needs_reason": "每次导出都会记录操作者和原因：请加 --reason 原因"},
}  # fmt: skip
"""The export command's words per language; a trigger (`daily`, `manual`) is said by its value's key."""


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    list_only: Annotated[bool, typer.Option("--list", help="show the exports that exist instead of writing one")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    reason: Annotated[str, typer.Option("--reason", help="why you export now; required unless --list")] = "",
    lang: LangOption = CliLang.EN,
) -> None:
    """Write every task and the demand per project and card type (CSV + JSON) to the reports bucket."""
    if not list_only and not reason:
        raise typer.BadParameter(WORDS[lang]["needs_reason"], param_hint="--reason")
    with cli_api(lang) as api:
        rows = api.get("/v1/exports") if list_only else [api.post("/v1/exports", {"reason": reason})]
    if as_json:
        print(json.dumps(rows if list_only else rows[0], indent=2, ensure_ascii=False))
        return
    console.print(exports_table(rows, "exports" if list_only else "written", lang))


def exports_table(rows: list[dict[str, Any]], title: str, lang: CliLang = CliLang.EN) -> Table:
    words = WORDS[lang]
    table = Table(title=words["title"].format(what=words[title], n=len(rows), bucket=rows[0]["bucket"] if rows else "-"))
    for column in ("day", "at", "trigger", "actor", "reason", "tasks", "objects"):
        table.add_column(words[column], overflow="fold")
    for row in rows:
        objects = "\n".join(f"{o['key']} @ {o['version_id']}" for o in row["objects"])
        trigger = words[row["trigger"]] if row["trigger"] in ("daily", "manual") else row["trigger"]
        table.add_row(row["day"], row["at"][11:19], trigger, row["actor"], row.get("reason") or "–",
                      str(row["tasks"]), objects)  # fmt: skip
    return table
