"""Version 1 of `policy` and `cards` from what is in force, written once (history starts there)."""

from __future__ import annotations

from services.config.store import ConfigStore
from services.dispatcher.config import DispatcherConfig
from shared.config import CARDS, POLICY, ValidDocument, cards_seed_text, policy_seed_text, validate_document
from shared.logging import get_logger

log = get_logger(__name__)


def policy_seed(config: DispatcherConfig) -> tuple[ValidDocument, str]:
    """The policy in force for a dispatcher with `config`, as a document, and where it came from."""
    overrides = config.policy_overrides()
    source = f"preset {config.policy!r}" + (
        f" with CARDFLOW_DISPATCHER_* overrides {', '.join(f'{k}={v}' for k, v in sorted(overrides.items()))}"
        if overrides else " (no CARDFLOW_DISPATCHER_* overrides)"
    )
    return validate_document(POLICY, policy_seed_text(config.policy_in_force(), source)), source


async def seed_documents(store: ConfigStore, *, actor: str, config: DispatcherConfig | None = None) -> list[str]:
    """Seed `policy` and `cards` where they have no version; return the names written now."""
    policy, source = policy_seed(config or DispatcherConfig())
    seeds = (
        (policy, f"seeded at first start from what was in force: {source}"),
        (validate_document(CARDS, cards_seed_text()), "seeded at first start from the packaged catalog shared/cards/catalog.yaml"),
    )
    written = []
    for valid, reason in seeds:
        if await store.seed(valid, actor=actor, reason=reason) is not None:
            written.append(valid.name.name)
    if written:
        log.info("config documents seeded", documents=written)
    return written
