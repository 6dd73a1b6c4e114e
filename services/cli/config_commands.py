"""`cardflow config ...` and `cardflow template ...`: the one change path, as HTTP API calls.

    cardflow config show policy > policy.yaml          # first line names the version (the base)
    $EDITOR policy.yaml
    cardflow config apply policy policy.yaml --reason "more headroom for the launch"
    cardflow config set policy headroom.default=0.15 --reason "..."
    cardflow config history policy [--json] / diff policy 1 [3] / rollback policy 1 --reason "..."
    cardflow template list / show NAME [--version V] / apply FILE [--name NAME] --reason "..."

Changes need a token with the `operator` role; every change records the token's actor and the reason.
`--lang zh` (or `CARDFLOW_LANG=zh`): tables and answers in Chinese. `config show` and `template show`
print the document itself (its first line is parsed back by `apply`), so they have no language; a
diff is the diff, only its sentences around it are said in Chinese.
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
errors = Console(stderr=True, soft_wrap=True)

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded in the history and the event (required)")]
BaseOption = Annotated[int | None, typer.Option("--base", min=1, help="the version your change is based on (a stale base is refused)")]
VersionOption = Annotated[int | None, typer.Option("--version", min=1, help="a version (default: the one in force)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
NameArgument = Annotated[str, typer.Argument(help="policy, cards or templates/<name>")]

WORDS: dict[CliLang, dict[str, str]] = {
    CliLang.EN: {
        "in_force": "{name} version {version} is in force ({action} by {actor}: {reason}); s3 version {s3}",
        "no_difference": "{name}: no difference", "versions": "{name}: {n} version(s)",
        "version": "version", "at": "at", "actor": "actor", "action": "action", "reason": "reason", "sha256": "sha256",
        "s3 version": "s3 version", "rolled_back_to": "{action} to v{version}",
        "seeded": "seeded", "applied": "applied", "set": "set", "rolled_back": "rolled back",
        "wide_hint": "sha256 and S3 version ids: `cardflow config history {name} --json` (or a terminal of {width}+ columns)",
        "uncommitted": "{n} S3 version(s) of {name} belong to no version: changes that never committed (never in force; harmless).",
        "templates": "templates ({n})", "template": "template", "latest": "latest",
    },
    CliLang.ZH: {
        "in_force": "{name} 第 {version} 版已生效（{actor} {action}：{reason}）；S3 版本 {s3}",
        "no_difference": "{name}：没有差异", "versions": "{name}：共 {n} 个版本",
        "version": "版本", "at": "时间", "actor": "操作者", "action": "操作", "reason": "原因", "sha256": "sha256",
        "s3 version": "S3 版本", "rolled_back_to": "{action}到第 {version} 版",
        "seeded": "初始导入", "applied": "应用", "set": "修改键值", "rolled_back": "回滚",
        "wide_hint": "sha256 和 S3 版本 ID：`cardflow config history {name} --json`（或用 {width} 列以上的终端）",
        "uncommitted": "{name} 有 {n} 个 S3 版本不属于任何版本：从未提交的修改（从未生效，无害）。",
        "templates": "模板（{n} 个）", "template": "模板", "latest": "最新版本",
    },
}  # fmt: skip
"""The config and template commands' words per language; an action (`ConfigAction`) is said by its value's key."""


def _action(action: str, words: dict[str, str]) -> str:
    """How a version came to be, as said (an unknown action as it is)."""
    return words[action] if action in ("seeded", "applied", "set", "rolled_back") else action


def register(app: typer.Typer) -> None:
    """Attach `config ...` and `template ...`."""
    config = typer.Typer(help="Versioned configuration in object storage: show, apply, set, history, diff, rollback, what-if.",
                         no_args_is_help=True)  # fmt: skip
    app.add_typer(config, name="config")
    for name, command in (("show", show), ("apply", apply), ("set", set_values), ("history", history),
                          ("diff", diff), ("rollback", rollback)):  # fmt: skip
        config.command(name)(command)
    from services.cli.what_if import what_if

    config.command("what-if")(what_if)
    template = typer.Typer(help="Submission templates: list, show, apply.", no_args_is_help=True)
    app.add_typer(template, name="template")
    template.command("list")(template_list)
    template.command("show")(template_show)
    template.command("apply")(template_apply)


def show(name: NameArgument, version: VersionOption = None) -> None:
    """Print a document version as YAML (first line: its version, kept on apply as the base)."""
    with cli_api() as api:
        answer = api.get("/v1/config/show", name=name, version=version)
    print(answer["header"] + answer["content"], end="")


def apply(name: NameArgument, file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the YAML file")],
          reason: ReasonOption, base: BaseOption = None, lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Make FILE the new version of NAME (validated first; a bad document changes nothing)."""
    body = {"name": name, "content": file.read_text(encoding="utf-8"), "base": base, "reason": reason}
    with cli_api(lang) as api:
        answer = api.post("/v1/config/apply", body)
    print_change(answer, lang)


def set_values(name: NameArgument,
               assignments: Annotated[list[str], typer.Argument(help="key.path=value pairs, e.g. headroom.default=0.15")],
               reason: ReasonOption, base: BaseOption = None, lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Set keys of the version in force (comments and order kept) as a new version."""
    with cli_api(lang) as api:
        answer = api.post("/v1/config/set", {"name": name, "assignments": assignments, "base": base, "reason": reason})
    print_change(answer, lang)


def history(name: NameArgument, as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Every version of NAME: who, when, why, sha256 and where it is in the bucket."""
    with cli_api(lang) as api:
        answer = api.get("/v1/config/history", name=name)
    if as_json:
        print(json.dumps(answer["versions"], indent=2, ensure_ascii=False))
        return
    wide, words = console.width >= WIDE_HISTORY, WORDS[lang]
    console.print(history_table(answer["name"], answer["versions"], with_objects=wide, lang=lang))
    if not wide:
        errors.print(words["wide_hint"].format(name=answer["name"], width=WIDE_HISTORY), style="dim", markup=False)
    if answer["uncommitted_s3_versions"]:
        errors.print(words["uncommitted"].format(n=len(answer["uncommitted_s3_versions"]), name=answer["name"]))


def diff(name: NameArgument, old: Annotated[int, typer.Argument(min=1)],
         new: Annotated[int | None, typer.Argument(min=1, help="default: the version in force")] = None,
         lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Unified diff from version OLD to NEW."""
    with cli_api(lang) as api:
        answer = api.get("/v1/config/diff", name=name, old=old, new=new)
    print(answer["diff"] or WORDS[lang]["no_difference"].format(name=name), end="" if answer["diff"] else "\n")


def rollback(name: NameArgument, version: Annotated[int, typer.Argument(min=1, help="the version to go back to")],
             reason: ReasonOption, base: BaseOption = None, lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Write VERSION's content as a new version (history is never rewritten)."""
    with cli_api(lang) as api:
        answer = api.post("/v1/config/rollback", {"name": name, "version": version, "base": base, "reason": reason})
    print_change(answer, lang)


def template_list(as_json: JsonOption = False, lang: LangOption = CliLang.EN) -> None:
    """Every template and its latest version."""
    with cli_api(lang) as api:
        rows = api.get("/v1/config/documents", kind="template")
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    console.print(templates_table(rows, lang))


def templates_table(rows: list[dict[str, Any]], lang: CliLang = CliLang.EN) -> Table:
    """Each template's latest version: when, who, why."""
    words = WORDS[lang]
    table = Table(title=words["templates"].format(n=len(rows)))
    for column in ("template", "latest", "at", "actor", "reason"):
        table.add_column(words[column], overflow="fold")
    for row in rows:
        table.add_row(row["name"].removeprefix("templates/"), str(row["version"]), row["at"][:19], row["actor"], row["reason"])
    return table


def template_show(name: Annotated[str, typer.Argument(help="the template's name")], version: VersionOption = None) -> None:
    """Print a template version as YAML."""
    show(f"templates/{name}", version)


def template_apply(file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the template YAML")],
                   reason: ReasonOption,
                   name: Annotated[str | None, typer.Option("--name", help="default: the file name without .yaml")] = None,
                   base: BaseOption = None, lang: LangOption = CliLang.EN) -> None:  # fmt: skip
    """Create or change a template (a new version; submissions pin the version they used)."""
    apply(f"templates/{name or file.stem}", file, reason, base, lang)


def print_change(answer: dict[str, Any], lang: CliLang = CliLang.EN) -> None:
    """What a change wrote, and its diff."""
    words = WORDS[lang]
    errors.print(words["in_force"].format(name=answer["name"], version=answer["version"], action=_action(answer["action"], words),
                                          actor=answer["actor"], reason=answer["reason"], s3=answer["s3_version_id"]))  # fmt: skip
    print(answer["diff"], end="")


WIDE_HISTORY = 150
"""Terminal columns from which `config history` shows each version's sha256 and S3 version id."""


def history_table(name: str, versions: list[dict[str, Any]], *, with_objects: bool = True,
                  lang: CliLang = CliLang.EN) -> Table:  # fmt: skip
    """Who, when, what and why per version; `with_objects`: also its sha256 and S3 version id."""
    words = WORDS[lang]
    table = Table(title=words["versions"].format(name=name, n=len(versions)))
    table.add_column(words["version"], no_wrap=True)
    table.add_column(words["at"], min_width=10)  # date and time on two lines when narrow
    table.add_column(words["actor"], overflow="fold")
    table.add_column(words["action"], overflow="fold")
    table.add_column(words["reason"], overflow="fold")
    if with_objects:
        table.add_column(words["sha256"], no_wrap=True)
        table.add_column(words["s3 version"], no_wrap=True)
    for row in versions:
        action = _action(row["action"], words)
        if row["rolled_back_to"]:
            action = words["rolled_back_to"].format(action=action, version=row["rolled_back_to"])
        cells = [str(row["version"]), row["at"][:19].replace("T", " "), row["actor"], action, row["reason"]]
        table.add_row(*cells, *([row["sha256"][:12], row["s3_version_id"]] if with_objects else []))
    return table
