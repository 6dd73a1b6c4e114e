"""`cardflow check FILE [--json]`: will it run, where, when, at what cost, and what is missing?

An API client of `POST /v1/check` (any token): every check a submission will face, without
submitting it — template, validation, each input, the card types it matches (runtime and cost),
quota to its estimated end, approval (and from whom), deadline, and the estimated start from a plan
over the current snapshot — printed as a checklist, ✓ or ✗ with the reason each (– not checked).
A file may hold several submissions (a JSON list or YAML documents): each gets its checklist.
Exit code 0 when every submission passes, 4 when some check fails (the checklist says which).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api

console = Console()
EXIT_CHECK_FAILED = 4
MARK = {True: "[green]✓[/green]", False: "[red]✗[/red]", None: "[dim]–[/dim]"}


def register(app: typer.Typer) -> None:
    app.command("check")(check)


def check(
    file: Annotated[Path, typer.Argument(help="a submission file (JSON or YAML), as for `cardflow submit`", exists=True,
                                         dir_okay=False)],
    as_json: Annotated[bool, typer.Option("--json", help="print the answers as JSON")] = False,
) -> None:
    """Pre-flight: every check the submission will face, without submitting it."""
    from shared.submission.validate import load_submission_file

    submissions = load_submission_file(file)
    with cli_api() as api:
        answers = [api.post("/v1/check", submission) for submission in submissions]
    if as_json:
        print(json.dumps(answers if len(answers) > 1 else answers[0], indent=2))
    else:
        for submission, answer in zip(submissions, answers, strict=True):
            console.print(checklist_table(answer, str(submission.get("name", file.name))))
    if not all(answer["ok"] for answer in answers):
        raise typer.Exit(EXIT_CHECK_FAILED)


def checklist_table(answer: dict[str, Any], title: str) -> Table:
    """A checklist as a table: ✓ / ✗ / – and the reason of each check."""
    verdict = "[green]would run[/green]" if answer["ok"] else "[red]would not run as it is[/red]"
    table = Table(title=f"{title}: {verdict}", show_lines=False)
    table.add_column("", width=2)
    table.add_column("check")
    table.add_column("why", overflow="fold")
    for item in answer["checks"]:
        table.add_row(MARK[item["passed"]], item["check"], item["detail"])
    return table
