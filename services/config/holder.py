"""Hot reload: the version of a document a service uses, refreshed with one cheap query.

    policies = policy_holder(fallback=config.policy_in_force())
    await policies.refresh(pool)      # at the start of each cycle: a newer version? load it
    plan(snapshot, queue, policies.value, now); lease.policy_version = policies.version

`refresh` asks for a version newer than the one held (an index lookup; no row = nothing new) and
builds the value only when there is one, so every instance of a service follows `config.changed`
within one cycle without a restart, and also picks up a change whose event it never consumed (a
consumer group hands each event to ONE instance). Until the config service has seeded the
document (or where the `config` schema does not exist, e.g. a test running one service), the
holder answers `fallback` with version None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import asyncpg

from services.config.store import SCHEMA
from shared.config import (
    POLICY,
    DocumentInvalid,
    DocumentName,
    PolicyDocument,
    policy_document,
    scheduling_policy,
    validate_document,
)
from shared.logging import get_logger
from shared.scheduling.policy_knobs import Policy

T = TypeVar("T")

log = get_logger(__name__)


class DocumentHolder(Generic[T]):
    """The value built from the newest version of one document (or the fallback before there is one)."""

    def __init__(self, name: DocumentName, build: Callable[[Any, int], T], fallback: T) -> None:
        self.name = name
        self._build = build
        self.value: T = fallback
        self.version: int | None = None
        self._store_exists = False
        self._query = (
            f"SELECT version, content FROM {SCHEMA}.versions WHERE name = $1 AND version > $2"
            " ORDER BY version DESC LIMIT 1"
        )

    async def refresh(self, conn: asyncpg.Connection | asyncpg.Pool) -> bool:
        """Load the newest version if it is newer than the one held; True when the value changed."""
        if not self._store_exists:  # a failed query would abort the caller's transaction: ask first
            self._store_exists = bool(await conn.fetchval(f"SELECT to_regclass('{SCHEMA}.versions') IS NOT NULL"))
            if not self._store_exists:
                return False
        row = await conn.fetchrow(self._query, self.name.name, self.version or 0)
        if row is None:
            return False
        try:
            model = validate_document(self.name, row["content"]).model
        except DocumentInvalid as invalid:  # stored documents were validated; a newer model may refuse one
            log.error("stored document no longer valid; keeping the version in use", document=self.name.name,
                      version=row["version"], kept=self.version, problems=str(invalid))
            return False
        self.value, previous, self.version = self._build(model, row["version"]), self.version, row["version"]
        log.info("configuration reloaded", document=self.name.name, version=self.version, previous=previous)
        return True


@dataclass(frozen=True)
class PolicyInForce:
    """The `policy` document in force, and the `Policy` that `plan()` takes from it."""

    document: PolicyDocument
    scheduling: Policy


def policy_in_force_holder(fallback: Policy) -> DocumentHolder[PolicyInForce]:
    """The whole policy document in force (its governance sections too), else `fallback` as a document."""
    return DocumentHolder(
        POLICY, lambda model, version: PolicyInForce(model, scheduling_policy(model, name=f"policy v{version}")),
        PolicyInForce(policy_document(fallback), fallback),
    )


def policy_holder(fallback: Policy) -> DocumentHolder[Policy]:
    """The policy the dispatcher plans with: the `policy` document in force, else `fallback` (env preset)."""
    return DocumentHolder(POLICY, lambda model, version: scheduling_policy(model, name=f"policy v{version}"), fallback)

