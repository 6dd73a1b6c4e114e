"""`cardflow board`: the readiness board in the terminal, and `--snapshot` to the reports bucket.

An API client (PLAN decision 1): it reads `GET /v1/board/groups` and writes with
`POST /v1/board/snapshot`; it never touches a backend itself.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console()
errors = Console(stderr=True, soft_wrap=True)
ENV_API_URL = "CARDFLOW_API_URL"
ENV_TOKEN = "CARDFLOW_TOKEN"
DEFAULT_API_URL = "http://127.0.0.1:8080"


class BoardLang(StrEnum):
    EN = "en"
    ZH = "zh"


def register(app: typer.Typer) -> None:
    @app.command("board")
    def board(
        as_json: Annotated[bool, typer.Option("--json", help="print the board as JSON")] = False,
        lang: Annotated[BoardLang, typer.Option("--lang", envvar="CARDFLOW_LANG", help="en or zh")] = BoardLang.EN,
        snapshot: Annotated[bool, typer.Option("--snapshot", help="write the board to the reports bucket now")] = False,
        reason: Annotated[str, typer.Option("--reason", help="why (kept with the snapshot)")] = "on demand",
        api_url: Annotated[str, typer.Option("--api", envvar=ENV_API_URL, help="the console's URL")] = DEFAULT_API_URL,
    ) -> None:
        """The readiness board: what can run now and what waits for what (data, quota, approval, GPUs...)."""
        if snapshot:
            written = _call(api_url, "POST", "/v1/board/snapshot", json={"reason": reason})
            if as_json:
                console.print_json(json.dumps(written))
                return
            console.print(f"board of {written['day']} ({written['tasks']} open tasks) written to s3://{written['bucket']}/:")
            for obj in written["objects"]:
                console.print(f"  {obj['key']}  version {obj['version_id']}  {obj['size']} bytes")
            return
        groups = _call(api_url, "GET", "/v1/board/groups", params={"lang": lang.value})
        if as_json:
            console.print_json(json.dumps(groups, ensure_ascii=False))
        else:
            for table in board_tables(groups, lang.value):
                console.print(table)


def _call(api_url: str, method: str, path: str, **kwargs: Any) -> Any:
    """The JSON answer, or one line on stderr and exit 1 (3 when the token is refused)."""
    import httpx

    token = os.environ.get(ENV_TOKEN)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.request(method, api_url.rstrip("/") + path, headers=headers, timeout=60, **kwargs)
    except httpx.HTTPError as exc:
        errors.print(f"cannot reach the console API at {api_url} ({exc}); set {ENV_API_URL} or --api")
        raise typer.Exit(1) from None
    if response.is_success:
        return response.json()
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    errors.print(f"{method} {path}: {response.status_code} {detail}")
    raise typer.Exit(3 if response.status_code in (401, 403) else 1)


def board_tables(groups: dict[str, Any], lang: str) -> list[Table]:
    """One summary table of the counts, then one table per non-empty group."""
    from services.console.labels import BLOCKER_LABELS, PAGE_LABELS, UI_LABELS

    names, label = BLOCKER_LABELS[lang], {**UI_LABELS[lang], **PAGE_LABELS[lang]}
    summary = Table(title=f"{label['board']}: {groups['total']} {label['open_tasks']}")
    present = [g for g in groups["groups"] if g["count"]]
    for group in present:
        summary.add_column(names[group["kind"]], justify="right")
    summary.add_row(*(str(group["count"]) for group in present))
    tables = [summary]
    for group in present:
        table = Table(title=f"{names[group['kind']]} ({group['count']})", title_justify="left")
        for column in ("task", "project", "class", "gpus", "waits_since", "inputs_missing", "sentence"):
            table.add_column(label[column], overflow="fold")
        for task in group["tasks"]:
            sentence = Text(task["sentence"])
            sentence.append(f" [{task['reason']}]", style="dim")
            table.add_row(task["name"] or task["id"], task["project"] or "", task["priority_class"] or "",
                          str(task["gpus"] or ""), (task["waiting_since"] or "")[:19].replace("T", " "),
                          "\n".join(i["input"] for i in task["inputs"]), sentence)  # fmt: skip
        tables.append(table)
    return tables
