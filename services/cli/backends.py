"""`cardflow up`, `cardflow endpoints`, `cardflow doctor`: start, show and check the backends."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the backend commands (filled in by the Foundation work)."""
