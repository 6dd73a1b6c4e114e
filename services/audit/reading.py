"""Reads of the audit archive: archived events (parsed, upcast), the chain's rows, a task's story.

Everything here only SELECTs from `audit.events`; `parse_event` upcasts events of older schema
versions, so the code folding them only ever sees the newest shapes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from services.audit.chain import StoredLink
from shared.events import Envelope, parse_event
from shared.events.carried import USAGE_CARRIER

SCHEMA = "audit"
CHUNK = 5_000


@dataclass(frozen=True, slots=True)
class ArchivedEvent:
    """An archived event and its place in the archive."""

    seq: int
    event: Envelope


async def archived_events(
    pool: asyncpg.Pool, *, after_seq: int = 0, until: datetime | None = None, chunk: int = CHUNK
) -> AsyncIterator[ArchivedEvent]:
    """Every archived event after `after_seq` (that occurred at or before `until`), in archive order."""
    last = after_seq
    while True:
        rows = await pool.fetch(
            f"SELECT seq, body FROM {SCHEMA}.events WHERE seq > $1 AND ($2::timestamptz IS NULL OR occurred_at <= $2)"
            " ORDER BY seq LIMIT $3",
            last, until, chunk,
        )  # fmt: skip
        for row in rows:
            yield ArchivedEvent(row["seq"], parse_event(row["body"]))
        if len(rows) < chunk:
            return
        last = rows[-1]["seq"]


async def chain_links(pool: asyncpg.Pool, *, after_seq: int = 0, chunk: int = CHUNK) -> AsyncIterator[list[StoredLink]]:
    """The chain's rows in chunks, in sequence order."""
    last = after_seq
    while True:
        rows = await pool.fetch(
            f"SELECT seq, event_id, body, prev_hash, hash FROM {SCHEMA}.events WHERE seq > $1 ORDER BY seq LIMIT $2",
            last, chunk,
        )  # fmt: skip
        if rows:
            yield [StoredLink(r["seq"], r["event_id"], r["body"], r["prev_hash"], r["hash"]) for r in rows]
        if len(rows) < chunk:
            return
        last = rows[-1]["seq"]


async def task_events(pool: asyncpg.Pool, task_id: str) -> list[ArchivedEvent]:
    """Every archived event about a task: its own, its leases' (renewals, revocations, releases, usage), and the
    `usage.batch_recorded`s that carry a slice of it (they name no one task: found through the index of the tasks
    their slices name, `audit.carried_task_ids`, migration 003)."""
    rows = await pool.fetch(
        f"SELECT seq, body FROM {SCHEMA}.events WHERE task_id = $1"
        f" UNION ALL SELECT seq, body FROM {SCHEMA}.events WHERE type = '{USAGE_CARRIER}'"
        f" AND {SCHEMA}.carried_task_ids(body) @> ARRAY[$1::text] ORDER BY seq",
        task_id,
    )  # fmt: skip  # the carriers' type written out, not a parameter: the partial index's condition must match it
    return [ArchivedEvent(row["seq"], parse_event(row["body"])) for row in rows]


async def events_about(pool: asyncpg.Pool, subjects: Sequence[str]) -> list[ArchivedEvent]:
    rows = await pool.fetch(
        f"SELECT seq, body FROM {SCHEMA}.events WHERE subject = ANY($1::text[]) ORDER BY seq", list(subjects)
    )
    return [ArchivedEvent(row["seq"], parse_event(row["body"])) for row in rows]


async def archive_size(pool: asyncpg.Pool) -> tuple[int, str | None]:
    """(last sequence number, its hash); (0, None) for an empty archive."""
    row = await pool.fetchrow(f"SELECT seq, hash FROM {SCHEMA}.events ORDER BY seq DESC LIMIT 1")
    return (row["seq"], row["hash"]) if row else (0, None)
