"""`cardflow approve TASK --reason R` and `cardflow deny TASK --reason R`: a reviewer's decision.

API clients of `POST /v1/tasks/{id}/approve|deny` (role reviewer, a listed reviewer of the task's
project, never its submitter). The dispatcher carries the decision out (`task.approved`, or
`task.denied` and `task.cancelled`); `cardflow status TASK` shows it.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from services.cli.client import cli_api
from services.cli.task_refs import TaskArgument, task_id_of

console = Console()

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded with the decision")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]


def register(app: typer.Typer) -> None:
    app.command("approve")(approve)
    app.command("deny")(deny)


def approve(task_id: TaskArgument, reason: ReasonOption, as_json: JsonOption = False) -> None:
    """Approve a task that waits for approval (reviewer): it may start."""
    _review(task_id, "approve", reason, as_json)


def deny(task_id: TaskArgument, reason: ReasonOption, as_json: JsonOption = False) -> None:
    """Deny a task that waits for approval (reviewer): it will not run."""
    _review(task_id, "deny", reason, as_json)


def _review(ref: str, decision: str, reason: str, as_json: bool) -> None:
    with cli_api() as api:
        task_id = task_id_of(api, ref)
        answer = api.post(f"/v1/tasks/{task_id}/{decision}", {"reason": reason})
    if as_json:
        print(json.dumps(answer, indent=2))
        return
    verb = "approved" if decision == "approve" else "denied"
    console.print(f"task {task_id} {verb} by {answer['reviewer']} (the dispatcher carries it out within a cycle)")
