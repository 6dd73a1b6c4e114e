"""`cardflow enroll AGENT_ID --reason TEXT`: an agent's own Redis user, made through the API (admin);
`cardflow unenroll AGENT_ID --reason TEXT`: that user deleted (admin).

`enroll` calls `POST /v1/agents`; prints the user, its password and the `CARDFLOW_REDIS_URL` to give
the agent (shown only now). `unenroll` calls `DELETE /v1/agents/{id}` and prints what was deleted.
When the console may not make or delete Redis users, the API's 409 says which commands an admin
runs instead (`cardflow redis-users --agents-only --agent ID`; `ACL DELUSER agent.ID`), and this
prints it.
"""

from __future__ import annotations

import json
from urllib.parse import quote
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

UNENROL_LABELS = {
    CliLang.EN: {"title": "agent unenrolled", "agent_id": "agent", "redis_user": "Redis user deleted",
                 "saved": "gone after a Redis restart too", "yes": "yes",
                 "no": "no (Redis has no ACL file: remove the user from redis.conf if it is there)",
                 "event_id": "agent.unenrolled event",
                 "note": "Its password is refused from now on. Its leases are not ended here: they expire unrenewed"
                         " (the dispatcher's lease TTL) and their tasks are requeued.",
                 "already_deleted": "Redis had no such user any more (deleted by hand, or by an unenrolment whose"
                                    " record was lost): only the record was made now."},
    CliLang.ZH: {"title": "已注销代理", "agent_id": "代理", "redis_user": "已删除的 Redis 用户",
                 "saved": "Redis 重启后也不会恢复", "yes": "是",
                 "no": "否（Redis 未配置 ACL 文件：若 redis.conf 中有该用户，请一并删除）",
                 "event_id": "agent.unenrolled 事件",
                 "note": "从现在起它的密码将被拒绝。此处不会结束它的租约：租约因无法续期而过期（调度器的租约 TTL），"
                         "其任务随后重新排队。",
                 "already_deleted": "Redis 中已没有该用户（被手工删除，或之前的注销未能记录）：本次只补记了注销记录。"},
}  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("enroll")(enroll)
    app.command("unenroll")(unenroll)


def enroll(
    agent_id: Annotated[str, typer.Argument(help="the agent's id (`cardflow agent --id`); it will read only cf:agent:ID")],
    reason: Annotated[str, typer.Option("--reason", help="why; recorded in the agent.enrolled event")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Enrol an agent (admin): its own Redis user with a new password, shown once."""
    with cli_api(lang) as api:
        enrolled = api.post("/v1/agents", {"agent_id": agent_id, "reason": reason})
    print_answer(enrolled, as_json, LABELS[lang], ("agent_id", "redis_user", "password", "redis_url"))


def unenroll(
    agent_id: Annotated[str, typer.Argument(help="the agent's id; its Redis user agent.ID is deleted")],
    reason: Annotated[str, typer.Option("--reason", help="why; recorded in the agent.unenrolled event")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Unenrol an agent (admin): delete its Redis user, so its password is refused; its leases expire."""
    with cli_api(lang) as api:
        unenrolled = api.call("DELETE", f"/v1/agents/{quote(agent_id, safe='')}", body={"reason": reason}).json()
    print_answer(unenrolled, as_json, UNENROL_LABELS[lang], ("agent_id", "redis_user", "event_id"))
    if unenrolled.get("already_deleted") and not as_json:
        console.print(UNENROL_LABELS[lang]["already_deleted"])


def print_answer(answer: dict[str, object], as_json: bool, labels: dict[str, str], keys: tuple[str, ...]) -> None:
    """The API's answer as JSON, or as a two-column table (`keys`, then whether Redis saved it) and its note."""
    if as_json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
        return
    console.print(answer_table(answer, labels, keys))
    console.print(labels["note"])


def answer_table(answer: dict[str, object], labels: dict[str, str], keys: tuple[str, ...]) -> Table:
    table = Table(title=labels["title"], show_header=False)
    for key in keys:
        table.add_row(labels[key], str(answer[key]))
    table.add_row(labels["saved"], labels["yes"] if answer["saved"] else labels["no"])
    return table
