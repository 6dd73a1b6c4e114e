"""`EventBatch`: collect the events and agent commands of one transaction, append them in bulk.

A cycle or a batch of reports may emit thousands of events; one `next_subject_seq` round trip
per event would dominate. `flush` hands out every subject's next sequence numbers in ONE upsert
(subjects locked in sorted order, so concurrent writers cannot deadlock on them), then appends
the events with one multi-row insert per target stream. Order is kept per stream, and a subject
always goes to the same stream, so sequence order and outbox order agree per subject.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from shared.delivery.db import quote_schema
from shared.delivery.outbox import append_events, require_transaction
from shared.events import Envelope, caused_by, make_event, utcnow
from shared.names import EVENTS_STREAM


@dataclass(frozen=True, slots=True)
class _Pending:
    event_type: type[Envelope]
    subject: str
    data: Any
    stream: str
    links: dict[str, str]
    actor: str | None


@dataclass
class EventBatch:
    """Events (and commands) to append to `schema`'s outbox when the transaction is ready to commit."""

    schema: str
    producer: str
    actor: str
    now: datetime = field(default_factory=utcnow)
    _pending: list[_Pending] = field(default_factory=list)

    def add(
        self,
        event_type: type[Envelope],
        *,
        subject: str,
        data: Any,
        cause: Envelope | None = None,
        stream: str = EVENTS_STREAM,
    ) -> None:
        """Queue one event; `cause` links it to what caused it (correlation/causation ids, actor)."""
        links = caused_by(cause) if cause is not None else {}
        self._pending.append(_Pending(event_type, subject, data, stream, links, cause.actor if cause else None))

    def __len__(self) -> int:
        return len(self._pending)

    async def flush(self, conn: asyncpg.Connection) -> list[Envelope]:
        """Number and append everything queued, in the caller's transaction; return the events."""
        require_transaction(conn)
        if not self._pending:
            return []
        next_seq = await _reserve_sequences(conn, self.schema, Counter(p.subject for p in self._pending))
        events: dict[str, list[Envelope]] = {}
        for pending in self._pending:
            seq = next_seq[pending.subject]
            next_seq[pending.subject] = seq + 1
            event = make_event(
                pending.event_type, subject=pending.subject, subject_seq=seq, producer=self.producer,
                actor=pending.actor or self.actor, data=pending.data, occurred_at=self.now, **pending.links,
            )
            events.setdefault(pending.stream, []).append(event)
        for stream, stream_events in events.items():
            await append_events(conn, self.schema, stream_events, stream=stream)
        self._pending.clear()
        return [event for stream_events in events.values() for event in stream_events]


async def _reserve_sequences(conn: asyncpg.Connection, schema: str, counts: Counter[str]) -> dict[str, int]:
    """Reserve `counts[subject]` numbers per subject; return the first number of each."""
    subjects = sorted(counts)
    rows = await conn.fetch(
        f"INSERT INTO {quote_schema(schema)}.subject_seq AS s (subject, last_seq)"
        " SELECT subject, n FROM unnest($1::text[], $2::bigint[]) AS r(subject, n) ORDER BY subject"
        " ON CONFLICT (subject) DO UPDATE SET last_seq = s.last_seq + excluded.last_seq"
        " RETURNING subject, last_seq",
        subjects,
        [counts[s] for s in subjects],
    )
    return {row["subject"]: row["last_seq"] - counts[row["subject"]] + 1 for row in rows}
