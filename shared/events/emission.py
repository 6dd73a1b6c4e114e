"""`Emission`: an event (or agent command) a decision wants written, before it has a sequence number.

Pure folds return emissions; only the handler's save step turns them into envelopes (numbered per
subject) and appends them to its outbox in one statement (`services.common.runtime.Emitter.emit`).
So a fold never imports a module that talks to PostgreSQL or Redis.

    Emission(TaskStarted, task_subject("T1"), {"task_id": "T1", ...}, cause=report)
    Emission(LeaseGrantCommand, agent_subject("a1"), {...}, stream=agent_inbox("a1"))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.events.envelope import Envelope
from shared.names import EVENTS_STREAM


@dataclass(frozen=True, slots=True)
class Emission:
    """One event to append: its type, subject and payload, and what caused it.

    `cause` links the event to the message that caused it (correlation and causation ids, and by
    default its actor); callers that kept only the ids pass `correlation_id` / `causation_id`.
    `stream` sends it elsewhere than `cf:events` (an agent command goes to the agent's inbox).
    """

    event_type: type[Envelope] | str
    subject: str
    data: Any
    actor: str | None = None
    cause: Envelope | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    occurred_at: datetime | None = None
    stream: str = EVENTS_STREAM

    def links(self) -> dict[str, str | None]:
        """The correlation and causation ids the envelope carries."""
        cause = self.cause
        return {
            "correlation_id": self.correlation_id or ((cause.correlation_id or cause.event_id) if cause else None),
            "causation_id": self.causation_id or (cause.event_id if cause else None),
        }

    def actor_or(self, default: str) -> str:
        """Who the event names as its actor: the given one, else the cause's, else `default` (the service)."""
        return self.actor or (self.cause.actor if self.cause is not None else default)
