"""`EventBatch`: collect the emissions of one dispatcher transaction, then write them with `Emitter.emit`.

Agent commands go first: the relay publishes the outbox in batches, and a grant's command is what
the freed GPU waits for. Commands and events never share a subject (`agent/<id>` is only used on
agent inboxes), so every subject keeps its order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from services.common.runtime import Emitter
from shared.events import Envelope, utcnow
from shared.events.emission import Emission
from shared.names import EVENTS_STREAM


@dataclass
class EventBatch:
    """Emissions to append to `schema`'s outbox when the transaction is ready to commit."""

    schema: str
    producer: str
    actor: str
    now: datetime = field(default_factory=utcnow)
    _pending: list[Emission] = field(default_factory=list)

    def add(
        self, event_type: type[Envelope], *, subject: str, data: Any, cause: Envelope | None = None,
        stream: str = EVENTS_STREAM,
    ) -> None:
        """Queue one event; `cause` links it to what caused it (correlation/causation ids, actor)."""
        self._pending.append(Emission(event_type, subject, data, cause=cause, occurred_at=self.now, stream=stream))

    def __len__(self) -> int:
        return len(self._pending)

    async def flush(self, conn: asyncpg.Connection) -> list[Envelope]:
        """Number and append everything queued, in the caller's transaction; return the events."""
        pending = sorted(self._pending, key=lambda p: p.stream == EVENTS_STREAM)  # stable: commands first
        self._pending.clear()
        return await Emitter(self.schema, self.producer, self.actor).emit(conn, pending)
