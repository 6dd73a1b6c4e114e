"""`cardflow enroll AGENT_ID --reason TEXT`: an agent's own Redis user, made through the API (admin).

Calls `POST /v1/agents`; prints the user, its password and the `CARDFLOW_REDIS_URL` to give the agent
(shown only now). When the console may not make Redis users, the API's 409 says which commands an
admin runs instead (`cardflow redis-users --agents-only --agent ID`), and this prints it.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption

console = Console()

LABELS = {
    CliLang.EN: {"title": "agent enrolled", "agent_id": "agent", "redis_user": "Redis user", "password": "password",
                 "redis_url": "CARDFLOW_REDIS_URL", "saved": "kept across a Redis restart", "yes": "yes",
                 "no": "no (Redis has no ACL file)",
                 "note": "The password is shown only now: give the URL to the agent (its CARDFLOW_REDIS_URL)."},
    CliLang.ZH: {"title": "已登记代理", "agent_id": "代理", "redis_user": "Redis 用户", "password": "密码",
                 "redis_url": "CARDFLOW_REDIS_URL", "saved": "Redis 重启后仍保留", "yes": "是",
                 "no": "否（Redis 未配置 ACL 文件）",
                 "note": "密码仅显示这一次：请把该 URL 交给代理（作为它的 CARDFLOW_REDIS_URL）。"},
}  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("enroll")(enroll)


def enroll(
    agent_id: Annotated[str, typer.Argument(help="the agent's id (`cardflow agent --id`); it will read only cf:agent:ID")],
    reason: Annotated[str, typer.Option("--reason", help="why; recorded in the agent.enrolled event")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Enrol an agent (admin): its own Redis user with a new password, shown once."""
    with cli_api() as api:
        enrolled = api.post("/v1/agents", {"agent_id": agent_id, "reason": reason})
    if as_json:
        print(json.dumps(enrolled, indent=2))
        return
    console.print(enrolled_table(enrolled, lang))
    console.print(LABELS[lang]["note"])


def enrolled_table(enrolled: dict[str, object], lang: CliLang) -> Table:
    labels = LABELS[lang]
    table = Table(title=labels["title"], show_header=False)
    for key in ("agent_id", "redis_user", "password", "redis_url"):
        table.add_row(labels[key], str(enrolled[key]))
    table.add_row(labels["saved"], labels["yes"] if enrolled["saved"] else labels["no"])
    return table
