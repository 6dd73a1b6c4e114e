"""`cardflow board`: the readiness board in the terminal, and `--snapshot` to the reports bucket.

An API client (PLAN decision 1, `services.cli.client.cli_api`: CARDFLOW_API_URL and the caller's
token): it reads `GET /v1/board/groups` and writes with `POST /v1/board/snapshot`; it never
touches a backend itself.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from services.cli.lang import CliLang, LangOption

console = Console()

SNAPSHOT_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"written": "board of {day} ({tasks} open tasks) written to s3://{bucket}/:",
                 "object": "  {key}  version {version}  {size} bytes"},
    CliLang.ZH: {"written": "{day} 的就绪看板（{tasks} 个未结束任务）已写入 s3://{bucket}/：",
                 "object": "  {key}  版本 {version}  {size} 字节"},
}

def register(app: typer.Typer) -> None:
    @app.command("board")
    def board(
        as_json: Annotated[bool, typer.Option("--json", help="print the board as JSON")] = False,
        lang: LangOption = CliLang.EN,
        snapshot: Annotated[bool, typer.Option("--snapshot", help="write the board to the reports bucket now")] = False,
        reason: Annotated[str, typer.Option("--reason", help="why (kept with the snapshot)")] = "on demand",
    ) -> None:
        """The readiness board: what can run now and what waits for what (data, quota, approval, GPUs...)."""
        from services.cli.client import cli_api

        with cli_api(lang) as api:
            if snapshot:
                written = api.post("/v1/board/snapshot", {"reason": reason})
            else:
                groups = api.get("/v1/board/groups", lang=lang.value)
        if snapshot:
            _print_snapshot(written, as_json, lang)
        elif as_json:
            print(json.dumps(groups, ensure_ascii=False, indent=2))
        else:
            for table in board_tables(groups, lang.value):
                console.print(table)


def _print_snapshot(written: dict[str, Any], as_json: bool, lang: CliLang = CliLang.EN) -> None:
    if as_json:
        print(json.dumps(written, ensure_ascii=False, indent=2))
        return
    words = SNAPSHOT_WORDS[lang]
    console.print(words["written"].format(day=written["day"], tasks=written["tasks"], bucket=written["bucket"]))
    for obj in written["objects"]:
        console.print(words["object"].format(key=obj["key"], version=obj["version_id"], size=obj["size"]))


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
