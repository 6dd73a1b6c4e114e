"""`cardflow token create|list|revoke|bootstrap` and `cardflow whoami`: API tokens and roles.

`create`, `list` and `revoke` are API calls (an admin token is needed); `create` prints the new
secret alone on stdout (`TOKEN=$(cardflow token create ci --role submitter)`), what it is on
stderr. `bootstrap` is the one exception that talks to PostgreSQL directly: it creates the first
admin token of a deployment and refuses once an active admin token exists (docs/identity.md).
`--lang zh` (or `CARDFLOW_LANG=zh`): tables and answers in Chinese; the secret and JSON stay as they are.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.cli.client import cli_api
from services.cli.lang import CliLang, LangOption
from shared.identity import Role

console = Console()
errors = Console(stderr=True, soft_wrap=True)

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded in the event")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "created": "created token {id} for {name}: role {role}{scope}. The secret below is shown only now; keep it like a password.",
        "scope": " for project {project}", "revoked": "revoked token {id} of {name} ({role})",
        "whoami": "{actor}: role {role}{scope} (API {url})",
        "bootstrapped": "created admin token {id} for {name}. The secret below is shown only now.", "error": "error:",
        "title": "API tokens ({n})", "id": "id", "name": "name", "role": "role", "project": "project", "token": "token",
        "created_at": "created", "by": "by", "reason": "reason", "revoked_at": "revoked", "every": "every",
        "revoked_by": "{at} by {by}",
        "admin": "admin", "operator": "operator", "submitter": "submitter", "reviewer": "reviewer", "auditor": "auditor",
    },
    CliLang.ZH: {
        "created": "已为 {name} 创建令牌 {id}：角色 {role}{scope}。下面的密钥只显示这一次，请像密码一样保管。",
        "scope": "，限项目 {project}", "revoked": "已吊销 {name} 的令牌 {id}（{role}）",
        "whoami": "{actor}：角色 {role}{scope}（API {url}）",
        "bootstrapped": "已为 {name} 创建管理员令牌 {id}。下面的密钥只显示这一次。", "error": "错误：",
        "title": "API 令牌（{n} 个）", "id": "ID", "name": "名称", "role": "角色", "project": "项目", "token": "令牌",
        "created_at": "创建时间", "by": "创建人", "reason": "原因", "revoked_at": "已吊销", "every": "全部",
        "revoked_by": "{at}，由 {by}",
        "admin": "管理员", "operator": "运维", "submitter": "提交者", "reviewer": "审批人", "auditor": "审计员",
    },
}  # fmt: skip
"""The token commands' words per language; a role (`Role`) is said by its value's key."""


def _role(role: str, words: dict[str, str]) -> str:
    """A role as said: its Chinese name with the value (what `--role` takes) in Chinese."""
    said = words.get(role, role)
    return role if said == role else f"{said} ({role})"


def register(app: typer.Typer) -> None:
    """Attach `token ...` and `whoami`."""
    token = typer.Typer(help="API tokens: create, list, revoke (admin); bootstrap the first admin.", no_args_is_help=True)
    app.add_typer(token, name="token")
    token.command("create")(create)
    token.command("list")(list_tokens)
    token.command("revoke")(revoke)
    token.command("bootstrap")(bootstrap)
    app.command("whoami")(whoami)


def create(
    name: Annotated[str, typer.Argument(help="the holder; what they do is recorded as user:NAME")],
    role: Annotated[Role, typer.Option("--role", help="what the token may do (docs/identity.md)")],
    project: Annotated[str | None, typer.Option("--project", help="limit it to this project")] = None,
    reason: ReasonOption = "",
    as_json: JsonOption = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Create an API token (admin). The secret is printed once, on stdout."""
    with cli_api(lang) as api:
        issued = api.post("/v1/tokens", {"name": name, "role": role.value, "project": project, "reason": reason})
    if as_json:
        print(json.dumps(issued, indent=2, ensure_ascii=False))
        return
    info, words = issued["token"], WORDS[lang]
    scope = words["scope"].format(project=info["project"]) if info["project"] else ""
    errors.print(words["created"].format(id=info["token_id"], name=info["name"], role=_role(info["role"], words), scope=scope),
                 markup=False, highlight=False)  # fmt: skip
    print(issued["secret"])


def list_tokens(
    include_revoked: Annotated[bool, typer.Option("--all", help="also revoked tokens")] = False,
    as_json: JsonOption = False,
    lang: LangOption = CliLang.EN,
) -> None:
    """Tokens, oldest first (admin): holder, role, project, who created them; never the secrets."""
    with cli_api(lang) as api:
        rows = api.get("/v1/tokens", include_revoked=include_revoked or None)
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    console.print(tokens_table(rows, lang))


def revoke(
    ref: Annotated[str, typer.Argument(help="a token id, or a name (revokes every active token of that name)")],
    reason: ReasonOption = "",
    lang: LangOption = CliLang.EN,
) -> None:
    """Revoke tokens (admin): requests with them are refused from now on."""
    with cli_api(lang) as api:
        answer = api.post(f"/v1/tokens/{ref}/revoke", {"reason": reason})
    words = WORDS[lang]
    for info in answer["revoked"]:
        console.print(words["revoked"].format(id=info["token_id"], name=info["name"], role=_role(info["role"], words)))


def whoami(as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """The token this shell uses: its name, role and project."""
    with cli_api(lang) as api:
        me = api.get("/v1/whoami")
    if as_json:
        print(json.dumps(me, indent=2, ensure_ascii=False))
        return
    words = WORDS[lang]
    scope = words["scope"].format(project=me["project"]) if me["project"] else ""
    console.print(words["whoami"].format(actor=me["actor"], role=_role(me["role"], words), scope=scope, url=api.target.url))


def bootstrap(
    name: Annotated[str, typer.Argument(help="the first admin's name")],
    reason: ReasonOption = "",
    lang: LangOption = CliLang.EN,
) -> None:
    """Create the first admin token, straight in PostgreSQL (needs CARDFLOW_DATABASE_URL; refused once an admin exists)."""
    from services.cli.views import resolve_settings
    from services.identity.bootstrap import AdminExists, bootstrap_admin
    from shared.logging import configure_logging

    configure_logging("WARNING")  # logs go to stderr: stdout carries the secret alone
    dsn = resolve_settings(lang).database_dsn or ""
    try:
        issued = asyncio.run(bootstrap_admin(dsn, name, reason))
    except (AdminExists, ValueError) as exc:
        from rich.markup import escape

        errors.print(f"[red]{WORDS[lang]['error']}[/red] {escape(str(exc))}")  # the refusal's own sentence, as it is
        raise typer.Exit(1) from None
    errors.print(WORDS[lang]["bootstrapped"].format(id=issued.token.token_id, name=name), markup=False, highlight=False)
    print(issued.secret)


def tokens_table(rows: list[dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    words = WORDS[lang]
    table = Table(title=words["title"].format(n=len(rows)))
    for column in ("id", "name", "role", "project", "token", "created_at", "by", "reason", "revoked_at"):
        table.add_column(words[column], overflow="fold")
    for row in rows:
        revoked = words["revoked_by"].format(at=row["revoked_at"][:19], by=row["revoked_by"]) if row.get("revoked_at") else ""
        table.add_row(row["token_id"], row["name"], _role(row["role"], words), row["project"] or words["every"], row["hint"],
                      row["created_at"][:19], row["created_by"], row["reason"], revoked)  # fmt: skip
    return table
