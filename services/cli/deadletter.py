"""`cardflow deadletter list|show|replay|purge`: what no consumer could process, and what to do about it.

API calls with an operator token. `replay` and `purge` need `--reason`; each is recorded as an
event (`deadletter.replayed` / `deadletter.purged`) with the caller as actor. `--lang zh` (or
`CARDFLOW_LANG=zh`): tables and answers in Chinese (死信); the error text is the consumer's own, as it was.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()
errors = Console(stderr=True, soft_wrap=True)

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded in the event (required)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "title": "dead letters ({n})", "one": "dead letter {id}", "id": "id", "stream": "stream", "group": "group",
        "consumer": "consumer", "entry_id": "entry_id", "reason": "reason", "tries": "tries", "deliveries": "deliveries",
        "dead at": "dead at", "dead_at": "dead_at", "error": "error", "original": "original {key}",
        "invalid": "invalid", "failed": "failed", "exhausted": "exhausted",
        "replayed": "replayed {id} onto {stream} as {entry} (event {event})",
        "purged": "purged {n} dead-letter {entries}", "entry": "entry", "entries": "entries",
        "purge_what": "name the entries to purge, or give --before (not both)",
    },
    CliLang.ZH: {
        "title": "死信（{n} 条）", "one": "死信 {id}", "id": "ID", "stream": "流", "group": "消费组",
        "consumer": "消费者", "entry_id": "原条目 ID", "reason": "原因", "tries": "投递次数", "deliveries": "投递次数",
        "dead at": "进入死信时间", "dead_at": "进入死信时间", "error": "错误（原文）", "original": "原字段 {key}",
        "invalid": "无法解析（不重试）", "failed": "处理失败", "exhausted": "投递次数用尽",
        "replayed": "已将死信 {id} 重放到 {stream}，新条目 {entry}（事件 {event}）",
        "purged": "已删除 {n} 条死信{entries}", "entry": "", "entries": "",
        "purge_what": "请列出要删除的死信，或给出 --before（二者选一）",
    },
}  # fmt: skip
"""The dead-letter commands' words per language; a reason (`DeadReason`) is said by its value's key."""


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Dead letters (cf:deadletter): list, show, replay, purge (operator).", no_args_is_help=True)
    app.add_typer(group, name="deadletter")
    group.command("list")(list_command)
    group.command("show")(show)
    group.command("replay")(replay)
    group.command("purge")(purge)


def list_command(
    stream: Annotated[str | None, typer.Option("--stream", help="only entries from this stream, e.g. cf:ingest")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    as_json: JsonOption = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Dead entries, oldest first: where each came from, why it died, how often it was tried."""
    with cli_api(lang) as api:
        rows = api.get("/v1/deadletters", stream=stream, limit=limit)
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    console.print(deadletters_table(rows, lang))


def show(deadletter_id: Annotated[str, typer.Argument(help="the entry's id in cf:deadletter")], as_json: JsonOption = False,
         lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """One dead entry with its error and every original field."""
    with cli_api(lang) as api:
        row = api.get(f"/v1/deadletters/{deadletter_id}")
    if as_json:
        print(json.dumps(row, indent=2, ensure_ascii=False))
        return
    words = WORDS[lang]
    table = Table(title=words["one"].format(id=deadletter_id), show_header=False)
    for key in ("stream", "group", "consumer", "entry_id", "reason", "deliveries", "dead_at", "error"):
        table.add_row(words[key], _reason(row[key], words) if key == "reason" else str(row[key]))
    for key, value in row["original"].items():
        table.add_row(words["original"].format(key=key), value)
    console.print(table)


def _reason(reason: str, words: dict[str, str]) -> str:
    """A dead reason as said in the language (an unknown one as it is)."""
    return words.get(reason, reason) if reason in ("invalid", "failed", "exhausted") else reason


def replay(deadletter_id: Annotated[str, typer.Argument(help="the entry's id in cf:deadletter")], reason: ReasonOption,
           lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Put the entry back on its stream (every group of it reads it again; consumers skip what they applied)."""
    with cli_api(lang) as api:
        answer = api.post(f"/v1/deadletters/{deadletter_id}/replay", {"reason": reason})
    console.print(WORDS[lang]["replayed"].format(id=deadletter_id, stream=answer["stream"], entry=answer["replayed_as"],
                                                 event=answer["event_id"]))  # fmt: skip


def purge(
    reason: ReasonOption,
    ids: Annotated[list[str] | None, typer.Argument(help="the entries' ids (or --before)")] = None,
    before: Annotated[datetime | None, typer.Option("--before", help="every entry dead before this time (UTC)")] = None,
    lang: LangOption = CliLang.EN,
) -> None:
    """Delete dead entries for good: the ones named, or every one dead before --before."""
    words = WORDS[lang]
    if bool(ids) == (before is not None):
        raise typer.BadParameter(words["purge_what"])
    body: dict[str, Any] = {"reason": reason, "ids": ids or None,
                            "dead_before": before.isoformat() + ("Z" if before.tzinfo is None else "") if before else None}
    with cli_api(lang) as api:
        answer = api.post("/v1/deadletters/purge", body)
    count = len(answer["purged"])
    console.print(words["purged"].format(n=count, entries=words["entry" if count == 1 else "entries"]))


def deadletters_table(rows: list[dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    words = WORDS[lang]
    table = Table(title=words["title"].format(n=len(rows)))
    for column in ("id", "stream", "group", "reason", "tries", "dead at", "error"):
        table.add_column(words[column], overflow="fold")
    for row in rows:
        table.add_row(row["deadletter_id"], row["stream"], row["group"], _reason(row["reason"], words), str(row["deliveries"]),
                      row["dead_at"], row["error"][:120])  # fmt: skip
    return table
