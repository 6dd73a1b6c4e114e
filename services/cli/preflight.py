"""`cardflow check FILE [--json]`: will it run, where, when, at what cost, and what is missing?

An API client of `POST /v1/check` (any token): every check a submission will face, without
submitting it — template, validation, each input, the card types it matches (runtime and cost),
quota to its estimated end, approval (and from whom), deadline, and the estimated start from a plan
over the current snapshot — printed as a checklist, ✓ or ✗ with the reason each (– not checked).
A file may hold several submissions (a JSON list or YAML documents): each gets its checklist.
Exit code 0 when every submission passes, 4 when some check fails (the checklist says which).
`--lang zh` (or CARDFLOW_LANG=zh): the table and every reason in Chinese.
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
EXIT_CHECK_FAILED = 4
MARK = {True: "[green]✓[/green]", False: "[red]✗[/red]", None: "[dim]–[/dim]"}
CHECKLIST_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"ok": "would run", "not_ok": "would not run as it is", "check": "check", "why": "why",
                 "pre-flight": "pre-flight", "template": "template", "validation": "validation", "inputs": "inputs",
                 "cards": "cards", "quota": "quota", "approval": "approval", "deadline": "deadline", "start": "start"},
    CliLang.ZH: {"ok": "可以运行", "not_ok": "按当前内容无法运行", "check": "检查项", "why": "原因",
                 "pre-flight": "运行前检查", "template": "模板", "validation": "校验", "inputs": "输入数据",
                 "cards": "卡型", "quota": "配额", "approval": "审批", "deadline": "截止时间", "start": "预计开始"},
}


def register(app: typer.Typer) -> None:
    app.command("check")(check)


def check(
    file: Annotated[Path, typer.Argument(help="a submission file (JSON or YAML), as for `cardflow submit`", exists=True,
                                         dir_okay=False)],
    as_json: Annotated[bool, typer.Option("--json", help="print the answers as JSON")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Pre-flight: every check the submission will face, without submitting it."""
    from shared.submission.validate import load_submission_file

    submissions = load_submission_file(file)
    with cli_api(lang) as api:
        answers = [api.call("POST", "/v1/check", body=submission, params={"lang": lang.value}).json()
                   for submission in submissions]
    if as_json:
        print(json.dumps(answers if len(answers) > 1 else answers[0], ensure_ascii=False, indent=2))
    else:
        for submission, answer in zip(submissions, answers, strict=True):
            console.print(checklist_table(answer, str(submission.get("name", file.name)), lang))
    if not all(answer["ok"] for answer in answers):
        raise typer.Exit(EXIT_CHECK_FAILED)


def checklist_table(answer: dict[str, Any], title: str, lang: CliLang = CliLang.EN) -> Table:
    """A checklist as a table: ✓ / ✗ / – and the reason of each check (the API's, in the language asked)."""
    words = CHECKLIST_WORDS[lang]
    verdict = f"[green]{words['ok']}[/green]" if answer["ok"] else f"[red]{words['not_ok']}[/red]"
    table = Table(title=f"{title}: {verdict}", show_lines=False)
    table.add_column("", width=2)
    table.add_column(words["check"])
    table.add_column(words["why"], overflow="fold")
    for item in answer["checks"]:
        table.add_row(MARK[item["passed"]], words.get(item["check"], item["check"]), item["detail"])
    return table
