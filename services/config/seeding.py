"""What the config service writes at start: version 1 of `policy` and `cards`, and the demo's policy.

- `seed_documents`: version 1 of each document that has none, from what is in force (history
  starts there). Afterwards the documents are the truth: `warn_ignored_env_knobs` says so in the
  log when `CARDFLOW_DISPATCHER_*` knobs set here disagree with the policy in force.
- `reconcile_demo_policy`: `cardflow up --demo` (time scale given) puts the demo's scaled waiting
  times in force as a recorded change by `system:demo`; any other start takes them back
  (`shared.config.demo_policy`).
"""

from __future__ import annotations

from dataclasses import replace

from services.config.store import ConfigStore, NothingToChangeError, StaleBaseError
from services.dispatcher.config import DispatcherConfig
from shared.config import CARDS, POLICY, ValidDocument, cards_seed_text, policy_seed_text, validate_document
from shared.config import scheduling_policy
from shared.config.demo_policy import DEMO_ACTOR, PolicyVersion, demo_end, demo_start, is_demo_change, values_of
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


async def warn_ignored_env_knobs(store: ConfigStore, config: DispatcherConfig) -> str | None:
    """A warning (logged, and returned) when `CARDFLOW_DISPATCHER_*` policy knobs are set but the
    policy document in force says otherwise: they only ever seed version 1."""
    if config.policy == "cardflow" and not config.policy_overrides():
        return None
    head = await store.version(POLICY)
    in_force = scheduling_policy(validate_document(POLICY, head.content or "").model)
    if replace(in_force, name="") == replace(config.policy_in_force(), name=""):
        return None
    knobs = [f"CARDFLOW_DISPATCHER_POLICY={config.policy}"] + [
        f"CARDFLOW_DISPATCHER_{name.upper()}={value}" for name, value in sorted(config.policy_overrides().items())
    ]
    warning = (f"{', '.join(knobs)} set, but policy version {head.version} is in force and differs: the environment only "
               "seeds version 1; change the policy with `cardflow config set policy key=value --reason ...`")  # fmt: skip
    log.warning("dispatcher policy knobs ignored", detail=warning)
    return warning


async def reconcile_demo_policy(store: ConfigStore, time_scale: float | None) -> int | None:
    """With a demo time scale: the demo's values in force; without: the owner's back. The new version, or None."""
    records = await store.history(POLICY, content=True)
    history = [
        PolicyVersion(r.version, is_demo_change(r.actor, r.reason), values_of(validate_document(POLICY, r.content or "").model))
        for r in records
    ]  # fmt: skip
    change = demo_start(history, time_scale) if time_scale is not None else demo_end(history)
    if change is None:
        return None
    try:
        written = await store.set(POLICY, list(change.assignments), base=records[-1].version, actor=DEMO_ACTOR,
                                  reason=change.reason)  # fmt: skip
    except (StaleBaseError, NothingToChangeError) as lost:  # another config instance did it meanwhile
        log.info("demo policy left to another writer", detail=str(lost))
        return None
    log.info("demo policy changed", version=written.record.version, reason=change.reason)
    return written.record.version
