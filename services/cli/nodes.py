"""`cardflow nodes`: the fleet like Slurm's `sinfo` — one row per node: card type, state, GPUs used /
borrowed / free, mean utilisation, last heartbeat (an API call; any valid token). `--lang zh`: in Chinese."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()
NODE_WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {"title": "nodes", "node": "node", "card type": "card type", "state": "state", "GPUs": "GPUs",
                 "used": "used", "borrowed": "borrowed", "free": "free", "util %": "util %",
                 "last heartbeat": "last heartbeat", "seconds_ago": "{n} s ago", "minutes_ago": "{n} min ago",
                 "up": "up", "lost": "lost", "draining": "draining", "drained": "drained"},
    CliLang.ZH: {"title": "节点", "node": "节点", "card type": "卡型", "state": "状态", "GPUs": "GPU 数",
                 "used": "已用", "borrowed": "借用", "free": "空闲", "util %": "利用率 %",
                 "last heartbeat": "最近心跳", "seconds_ago": "{n} 秒前", "minutes_ago": "{n} 分钟前",
                 "up": "在线", "lost": "失联", "draining": "排空中", "drained": "已排空"},
}
NUMERIC = frozenset({"GPUs", "used", "borrowed", "free", "util %"})


def register(app: typer.Typer) -> None:
    app.command("nodes")(nodes)


def nodes(
    card_type: Annotated[str | None, typer.Option("--card-type", help="only nodes of this card type")] = None,
    state: Annotated[str | None, typer.Option("--state", help="only nodes in this state: up or lost")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Every node: card type, state, GPUs used / borrowed (opportunistic) / free, utilisation, last heartbeat."""
    with cli_api(lang) as api:
        rows = api.get("/v1/nodes")
    rows = [row for row in rows if (card_type is None or row["card_type"] == card_type)
            and (state is None or row["state"] == state)]  # fmt: skip
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console.print(nodes_table(rows, datetime.now(UTC), lang))


def nodes_table(rows: list[dict[str, Any]], now: datetime, lang: CliLang = CliLang.EN) -> Table:
    words = NODE_WORDS[lang]
    table = Table(title=f"{words['title']} ({len(rows)})")
    for column in ("node", "card type", "state", "GPUs", "used", "borrowed", "free", "util %", "last heartbeat"):
        table.add_column(words[column], justify="right" if column in NUMERIC else "left")
    for row in rows:
        util = "-" if row["mean_util_pct"] is None else f"{row['mean_util_pct']:.0f}"
        table.add_row(row["node_id"], row["card_type"], words.get(row["state"], row["state"]), str(row["gpus"]),
                      str(row["used"]), str(row["borrowed"]), str(row["free"]), util,
                      _ago(row["last_heartbeat"], now, words))  # fmt: skip
    return table


def _ago(stamp: str | None, now: datetime, words: dict[str, str]) -> str:
    if stamp is None:
        return "-"
    seconds = max(0.0, (now - datetime.fromisoformat(stamp)).total_seconds())
    if seconds < 120:
        return words["seconds_ago"].format(n=f"{seconds:.0f}")
    return words["minutes_ago"].format(n=f"{seconds / 60:.0f}")
