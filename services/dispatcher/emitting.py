"""`EventBatch`: collect the events and agent commands of one transaction, append them in bulk.

A cycle or a batch of reports may emit thousands of events; one `next_subject_seq` round trip
per event would dominate. `flush` hands out every subject's next sequence numbers in ONE upsert
(`next_subject_seqs`: subjects locked in sorted order, so concurrent writers cannot deadlock on
them), then appends everything — events to `cf:events`, commands to many agent inboxes — with ONE
multi-row insert (`append_routed`), in the order added, so per subject sequence order and outbox
order agree — except that agent commands go first: the relay publishes the outbox in batches, and
a grant's command is what the freed GPU waits for. Commands and events never share a subject
(`agent/<id>` is only used on agent inboxes), so every subject keeps its order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from shared.delivery.outbox import append_routed, next_subject_seqs, require_transaction
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
        pending = sorted(self._pending, key=lambda p: p.stream == EVENTS_STREAM)  # stable: commands first
        seqs = await next_subject_seqs(conn, self.schema, [p.subject for p in pending])
        routed = [
            (
                make_event(
                    p.event_type, subject=p.subject, subject_seq=seq, producer=self.producer,
                    actor=p.actor or self.actor, data=p.data, occurred_at=self.now, **p.links,
                ),
                p.stream,
            )
            for p, seq in zip(pending, seqs, strict=True)
        ]
        await append_routed(conn, self.schema, routed)
        self._pending.clear()
        return [event for event, _ in routed]
