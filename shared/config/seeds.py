"""Version 1 of each document: what was in force before the config store existed.

History begins at the starting point: the first time the config service runs, `policy` is
written from the dispatcher's preset and its `CARDFLOW_DISPATCHER_*` overrides, and `cards` from
the packaged catalog file, verbatim. Templates have no seed (there were none before).
"""

from __future__ import annotations

from importlib import resources

from shared.cards.catalog import PACKAGED_CATALOG
from shared.config.policy import policy_document
from shared.config.yaml_text import render_commented
from shared.scheduling.policy_knobs import Policy


def policy_seed_text(policy: Policy, source: str) -> str:
    """The policy document saying exactly `policy`, commented field by field; `source` says where it came from."""
    header = (
        "cardflow scheduling policy (the dispatcher's next cycle plans with the version in force).",
        f"Version 1 was written from what was in force: {source}.",
        "Change it with `cardflow config set policy key=value --reason ...` or `cardflow config apply`.",
        "",
    )
    return render_commented(policy_document(policy), header)


def cards_seed_text() -> str:
    """The packaged card catalog, byte for byte (its comments cite each figure's source)."""
    return resources.files("shared.cards").joinpath(PACKAGED_CATALOG).read_text(encoding="utf-8")
