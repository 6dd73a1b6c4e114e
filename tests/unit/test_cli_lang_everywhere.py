"""Every `cardflow` command that prints for people takes `--lang` (English or Chinese).

Walks typer's click commands; a command without `--lang` fails the test unless it is in
`MACHINE_OUTPUT` (output for machines or other programs, each with why). A listed command that
gained `--lang` (or no longer exists) fails the test too, so the list stays true.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from services.cli.main import app

MACHINE_OUTPUT = {
    # prints `export` lines for `eval "$(cardflow endpoints)"`; its error goes to stderr
    "endpoints": "export lines for a shell",
    # `ACL SETUSER` lines (passwords as comments) for `redis-cli < file`; it touches no backend
    "redis-users": "ACL commands for redis-cli",
    # the SQL of PostgreSQL roles and grants, for psql
    "pg-roles": "SQL for psql",
    # the document itself, to edit and give back to `config apply` (its first line, naming the base
    # version, is parsed there); nothing else is printed
    "config show": "a YAML document for `config apply`",
    "template show": "a YAML document for `template apply`",
    # runs one service process; prints only its structlog lines (JSON unless on a terminal), for log collectors
    "service": "a service process's logs",
    # runs a node agent process (usually under systemd); prints only its structlog lines
    "agent": "an agent process's logs",
    # serves the console and the API: one line with its address, then the server's log; the pages
    # themselves switch to Chinese (services/console/labels.py)
    "console": "a server's log; the console has its own language switch",
}


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    if hasattr(command, "commands"):  # a group (typer's vendored click)
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), command


def _takes_lang(command: Any) -> bool:
    return any("--lang" in param.opts for param in command.params)


COMMANDS = dict(_commands(typer.main.get_command(app)))


def test_every_command_for_people_takes_lang() -> None:
    missing = sorted(name for name, command in COMMANDS.items()
                     if not _takes_lang(command) and name not in MACHINE_OUTPUT)  # fmt: skip
    assert not missing, f"add `lang: LangOption` (services/cli/lang.py) to: {', '.join(missing)}"


def test_the_exceptions_are_real_commands_without_lang() -> None:
    listed = set(MACHINE_OUTPUT)
    assert listed <= set(COMMANDS), f"not a command (renamed?): {sorted(listed - set(COMMANDS))}"
    translated = sorted(name for name in listed if _takes_lang(COMMANDS[name]))
    assert not translated, f"takes --lang now; remove from the list: {translated}"
