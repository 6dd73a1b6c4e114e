"""`cardflow config ...` and `cardflow template ...`: the one change path, as HTTP API calls.

    cardflow config show policy > policy.yaml          # first line names the version (the base)
    $EDITOR policy.yaml
    cardflow config apply policy policy.yaml --reason "more headroom for the launch"
    cardflow config set policy headroom.default=0.15 --reason "..."
    cardflow config history policy [--json] / diff policy 1 [3] / rollback policy 1 --reason "..."
    cardflow template list / show NAME [--version V] / apply FILE [--name NAME] --reason "..."

Changes need a token with the `operator` role; every change records the token's actor and the reason.
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
errors = Console(stderr=True, soft_wrap=True)

ReasonOption = Annotated[str, typer.Option("--reason", help="why; recorded in the history and the event (required)")]
BaseOption = Annotated[int | None, typer.Option("--base", min=1, help="the version your change is based on (a stale base is refused)")]
VersionOption = Annotated[int | None, typer.Option("--version", min=1, help="a version (default: the one in force)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
NameArgument = Annotated[str, typer.Argument(help="policy, cards or templates/<name>")]


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
          reason: ReasonOption, base: BaseOption = None) -> None:  # fmt: skip
    """Make FILE the new version of NAME (validated first; a bad document changes nothing)."""
    body = {"name": name, "content": file.read_text(encoding="utf-8"), "base": base, "reason": reason}
    with cli_api() as api:
        answer = api.post("/v1/config/apply", body)
    print_change(answer)


def set_values(name: NameArgument,
               assignments: Annotated[list[str], typer.Argument(help="key.path=value pairs, e.g. headroom.default=0.15")],
               reason: ReasonOption, base: BaseOption = None) -> None:  # fmt: skip
    """Set keys of the version in force (comments and order kept) as a new version."""
    with cli_api() as api:
        answer = api.post("/v1/config/set", {"name": name, "assignments": assignments, "base": base, "reason": reason})
    print_change(answer)


def history(name: NameArgument, as_json: JsonOption = False) -> None:
    """Every version of NAME: who, when, why, sha256 and where it is in the bucket."""
    with cli_api() as api:
        answer = api.get("/v1/config/history", name=name)
    if as_json:
        print(json.dumps(answer["versions"], indent=2, ensure_ascii=False))
        return
    wide = console.width >= WIDE_HISTORY
    console.print(history_table(answer["name"], answer["versions"], with_objects=wide))
    if not wide:
        errors.print(f"sha256 and S3 version ids: `cardflow config history {answer['name']} --json` "
                     f"(or a terminal of {WIDE_HISTORY}+ columns)", style="dim")  # fmt: skip
    if answer["uncommitted_s3_versions"]:
        errors.print(f"{len(answer['uncommitted_s3_versions'])} S3 version(s) of {answer['name']} belong to no version: "
                     "changes that never committed (never in force; harmless).")  # fmt: skip


def diff(name: NameArgument, old: Annotated[int, typer.Argument(min=1)],
         new: Annotated[int | None, typer.Argument(min=1, help="default: the version in force")] = None) -> None:  # fmt: skip
    """Unified diff from version OLD to NEW."""
    with cli_api() as api:
        answer = api.get("/v1/config/diff", name=name, old=old, new=new)
    print(answer["diff"] or f"{name}: no difference", end="" if answer["diff"] else "\n")


def rollback(name: NameArgument, version: Annotated[int, typer.Argument(min=1, help="the version to go back to")],
             reason: ReasonOption, base: BaseOption = None) -> None:  # fmt: skip
    """Write VERSION's content as a new version (history is never rewritten)."""
    with cli_api() as api:
        answer = api.post("/v1/config/rollback", {"name": name, "version": version, "base": base, "reason": reason})
    print_change(answer)


def template_list(as_json: JsonOption = False) -> None:
    """Every template and its latest version."""
    with cli_api() as api:
        rows = api.get("/v1/config/documents", kind="template")
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    table = Table(title=f"templates ({len(rows)})")
    for column in ("template", "latest", "at", "actor", "reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["name"].removeprefix("templates/"), str(row["version"]), row["at"][:19], row["actor"], row["reason"])
    console.print(table)


def template_show(name: Annotated[str, typer.Argument(help="the template's name")], version: VersionOption = None) -> None:
    """Print a template version as YAML."""
    show(f"templates/{name}", version)


def template_apply(file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="the template YAML")],
                   reason: ReasonOption,
                   name: Annotated[str | None, typer.Option("--name", help="default: the file name without .yaml")] = None,
                   base: BaseOption = None) -> None:  # fmt: skip
    """Create or change a template (a new version; submissions pin the version they used)."""
    apply(f"templates/{name or file.stem}", file, reason, base)


def print_change(answer: dict[str, Any]) -> None:
    """What a change wrote, and its diff."""
    errors.print(f"{answer['name']} version {answer['version']} is in force ({answer['action'].replace('_', ' ')} by {answer['actor']}: "
                 f"{answer['reason']}); s3 version {answer['s3_version_id']}")  # fmt: skip
    print(answer["diff"], end="")


WIDE_HISTORY = 150
"""Terminal columns from which `config history` shows each version's sha256 and S3 version id."""


def history_table(name: str, versions: list[dict[str, Any]], *, with_objects: bool = True) -> Table:
    """Who, when, what and why per version; `with_objects`: also its sha256 and S3 version id."""
    table = Table(title=f"{name}: {len(versions)} version(s)")
    table.add_column("version", no_wrap=True)
    table.add_column("at", min_width=10)  # date and time on two lines when narrow
    table.add_column("actor", overflow="fold")
    table.add_column("action", overflow="fold")
    table.add_column("reason", overflow="fold")
    if with_objects:
        table.add_column("sha256", no_wrap=True)
        table.add_column("s3 version", no_wrap=True)
    for row in versions:
        action = row["action"].replace("_", " ") + (f" to v{row['rolled_back_to']}" if row["rolled_back_to"] else "")
        cells = [str(row["version"]), row["at"][:19].replace("T", " "), row["actor"], action, row["reason"]]
        table.add_row(*cells, *([row["sha256"][:12], row["s3_version_id"]] if with_objects else []))
    return table
