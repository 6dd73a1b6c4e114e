"""Entry point of the `cardflow` command: one typer app, subcommands registered per module."""

from __future__ import annotations

import typer

from services.cli.usage_errors import LocalisedGroup

app = typer.Typer(
    name="cardflow",
    cls=LocalisedGroup,  # usage errors in Chinese with --lang zh / CARDFLOW_LANG=zh
    help="cardflow — keep every GPU busy with the right work; make every GPU-hour accountable.",
    no_args_is_help=True,
    add_completion=True,  # `cardflow --install-completion` (bash, zsh, fish, PowerShell)
    pretty_exceptions_show_locals=False,
)


def _register() -> None:
    """Attach each area's commands. Each module exposes `register(app)`."""
    from services.cli import (
        agent, alerts, apply_logins, approvals, audit, backends, board, config_commands, deadletter, doctor, enroll, export,
        ledger, nodes, operator_verbs, pg_roles, preflight, queue, redis_users, review, rounds, service, simulate, submit,
        tokens, views,
    )

    for module in (agent, backends, doctor, service, simulate, views, submit, preflight, queue, approvals, alerts, ledger,
                   board, tokens, config_commands, export, deadletter, nodes, operator_verbs, audit, rounds, review,
                   redis_users, pg_roles, enroll, apply_logins):
        module.register(app)


_register()

if __name__ == "__main__":
    app()
