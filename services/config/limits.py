"""The submission limits in force: the `limits` section of the `policy` document, for intake.

    limits = await load_submission_limits(conn)     # per batch, in intake's transaction
    decisions = screen(requests, new_id, templates, limits)

One indexed query per batch reads the newest `policy` version's content; a document is parsed once
(process-wide cache keyed by its content), so a change (`cardflow config set policy
limits.max_gpus_per_task=64 ...`) applies to the next batch, in every intake process and in the
HTTP API alike. Before the config service has seeded the document (or where the `config` schema
does not exist, e.g. a test running intake alone) the limits are the defaults.
`CARDFLOW_MAX_GPUS_PER_TASK` overrides `max_gpus_per_task` either way (`shared.submission.site_limits`).
"""

from __future__ import annotations

from functools import lru_cache

import asyncpg

from services.config.store import SCHEMA
from shared.config import POLICY, validate_document
from shared.submission import SubmissionLimits, site_limits


async def load_submission_limits(conn: asyncpg.Connection) -> SubmissionLimits:
    """The limits of the `policy` version in force (see the module docstring)."""
    if not await conn.fetchval(f"SELECT to_regclass('{SCHEMA}.versions') IS NOT NULL"):
        return site_limits()
    content = await conn.fetchval(
        f"SELECT content FROM {SCHEMA}.versions WHERE name = $1 ORDER BY version DESC LIMIT 1", POLICY.name
    )
    return site_limits(_limits_of(content) if content is not None else None)


@lru_cache(maxsize=16)
def _limits_of(content: str) -> SubmissionLimits:
    return validate_document(POLICY, content).model.limits
