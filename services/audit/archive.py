"""Archiving `cf:events` into `audit.events`, each event once, linked into the hash chain.

The ledger service runs `subscribe_archive`: a batch consumer of `cf:events` in its own group
(`audit`), so archiving never waits for (or holds up) the ledger's accounting. Per batch, in one
transaction:

1. take the archive lock (one archiver appends at a time, whichever ledger instance runs it);
2. drop events already archived (a redelivery after a crash between COMMIT and XACK);
3. link the rest after the archive's last row (`services.audit.chain.chain_from`);
4. COPY them in as the writer role, which may only SELECT and INSERT.

Every entry is parsed with `parse_event` before it is archived (so replay can always fold the
archive); one that cannot be parsed is dead-lettered like for any consumer. What is hashed and
stored is the event's canonical JSON as it was written: the `event` field as the outbox relay
published it (the outbox stores `canonical_json`; `wire_fields` builds the same for hand-written
producers), or, for an entry FastStream framed itself, `canonical_json` of its JSON object. An
event of an old schema version is archived as it was, and upcast only when read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from services.audit.chain import EMPTY_HEAD, ChainHead, Linked, chain_from
from shared.delivery.consumer import OFF_PATH_LINGER_MS, reliable_batch_subscriber
from shared.delivery.entry_steps import Entry
from shared.delivery.migrations import advisory_key, migrate
from shared.delivery.wire import BODY_FIELD, extract_body
from shared.events import canonical_json, parse_event
from shared.logging import get_logger
from shared.names import AUDIT_GROUP, EVENTS_STREAM

SCHEMA = "audit"
MIGRATIONS = Path(__file__).parent / "sql"
WRITER_ROLE = "cardflow_audit_writer"
ARCHIVE_LOCK = advisory_key("archive", SCHEMA)
BATCH_SIZE = 500
ARCHIVED_COLUMNS = ("seq", "event_id", "type", "subject", "subject_seq", "producer", "actor", "occurred_at", "task_id",
                    "entry_id", "body", "prev_hash", "hash")
"""Written by COPY (binary), not INSERT ... unnest: at the ~470-row batches of 250 tasks/s, 3.7 instead of
9.2 us of the archiver's CPU per row, PostgreSQL's the same or less (docs/BENCHMARKS.md, Pipeline session 10)."""

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ArchivableEvent:
    """One `cf:events` entry, checked to be a valid event, ready to be archived."""

    entry_id: str
    event_id: str
    type: str
    subject: str
    subject_seq: int
    producer: str
    actor: str
    occurred_at: datetime
    task_id: str | None
    body: str


def archivable(entry: Entry) -> ArchivableEvent:
    """Parse a stream entry (raises, and the entry is dead-lettered, when it is not a valid event)."""
    raw = extract_body(entry.fields)
    event = parse_event(raw)
    body = raw.decode() if BODY_FIELD.encode() in entry.fields else canonical_json(json.loads(raw)).decode()
    return ArchivableEvent(
        entry_id=entry.entry_id, event_id=event.event_id, type=event.type, subject=event.subject,
        subject_seq=event.subject_seq, producer=event.producer, actor=event.actor,
        occurred_at=event.occurred_at, task_id=getattr(event.data, "task_id", None), body=body,
    )  # fmt: skip


async def prepare_archive(pool: asyncpg.Pool) -> None:
    """Create or upgrade the `audit` schema (idempotent, serialised like every migration)."""
    await migrate(pool, SCHEMA, MIGRATIONS)


async def load_head(conn: asyncpg.Connection | asyncpg.Pool) -> ChainHead:
    row = await conn.fetchrow(f"SELECT seq, hash FROM {SCHEMA}.events ORDER BY seq DESC LIMIT 1")
    return ChainHead(row["seq"], row["hash"]) if row else EMPTY_HEAD


async def archive_events(conn: asyncpg.Connection, events: Sequence[ArchivableEvent]) -> list[Linked]:
    """Append the events not archived yet, in order, to the chain (caller's transaction)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", ARCHIVE_LOCK)
    unique = list({event.event_id: event for event in events}.values())
    known = await conn.fetch(
        f"SELECT event_id FROM {SCHEMA}.events WHERE event_id = ANY($1::text[])", [e.event_id for e in unique]
    )
    seen = {row["event_id"] for row in known}
    fresh = [event for event in unique if event.event_id not in seen]
    if not fresh:
        return []
    linked = chain_from(await load_head(conn), [event.body for event in fresh])
    await _as_writer(conn)
    await conn.copy_records_to_table(
        "events", schema_name=SCHEMA, columns=ARCHIVED_COLUMNS,
        records=[(row.seq, e.event_id, e.type, e.subject, e.subject_seq, e.producer, e.actor, e.occurred_at, e.task_id,
                  e.entry_id, row.body, row.prev_hash, row.hash) for e, row in zip(fresh, linked, strict=True)],
    )  # fmt: skip
    return linked


async def _as_writer(conn: asyncpg.Connection) -> None:
    """Switch this transaction to the INSERT-only writer role when this user may (see the migration)."""
    may = await conn.fetchval(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)"
        " THEN pg_has_role(current_user, $1, 'MEMBER') ELSE false END",
        WRITER_ROLE,
    )
    if may:
        await conn.execute(f"SET LOCAL ROLE {WRITER_ROLE}")


def subscribe_archive(broker: object, pool: asyncpg.Pool, *, batch_size: int = BATCH_SIZE) -> None:
    """Archive every `cf:events` entry, in the consumer group `audit` (see the module docstring)."""

    async def on_batch(events: list[ArchivableEvent]) -> None:
        async with pool.acquire() as conn, conn.transaction():
            linked = await archive_events(conn, events)
        if linked:
            log.debug("archived", events=len(linked), last_seq=linked[-1].seq)

    reliable_batch_subscriber(
        broker, stream=EVENTS_STREAM, group=AUDIT_GROUP, parse=archivable, parse_entry=True, max_records=batch_size,
        linger_ms=OFF_PATH_LINGER_MS,
    )(on_batch)  # fmt: skip
