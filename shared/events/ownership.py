"""Which service owns which event types, and the checks that keep a forged event out (pure).

Each event type has ONE owning service (ARCHITECTURE section 3's facets), named by the schema
whose outbox holds it: `OWNER_OF`. Two checks use it:

1. The gate (`services.gate`): each service's relay appends to its own stream
   `cf:events:<schema>`, which only that service's Redis user may write; the gate forwards an
   entry to `cf:events` only if the stream's owner owns the entry's type (`refusal`), and
   dead-letters it with the reason otherwise. Only the gate may write `cf:events`, so every event
   there was written by the service that owns its type: a `task.succeeded` from anyone but the
   dispatcher never reaches a consumer.
2. Consumers (`refused_producer`, in the delivery pipeline) also refuse a dispatcher-owned event
   whose `producer` is not `dispatcher/*`: the last line on a Redis without per-service users (one
   shared URL, or Redis 6.2), where the producer name is whatever the writer chose.
"""

from __future__ import annotations

from shared.events.dispatch import (
    TaskApproved,
    TaskCancelled,
    TaskApprovalDelayed,
    TaskCheckpointed,
    TaskDeadlineEndangered,
    TaskDenied,
    TaskFailed,
    TaskHeld,
    TaskQueued,
    TaskQuotaEndangered,
    TaskRequeued,
    TaskStarted,
    TaskSucceeded,
)
from shared.events.config import ConfigChanged, TemplateChanged
from shared.events.deadletters import DeadLetterPurged, DeadLetterReplayed
from shared.events.envelope import Envelope
from shared.events.identity import AgentEnrolled, AgentUnenrolled, TokenCreated, TokenRevoked
from shared.events.intake import (
    DataReadySignalled,
    TaskCancelRequested,
    TaskFlagCleared,
    TaskRejected,
    TaskReviewed,
    TaskSubmitted,
)
from shared.events.leases import LeaseExpired, LeaseGranted, LeaseReleased, LeaseRenewed, LeaseRevoked, NodeLost, NodeRegistered
from shared.events.ledger import (
    QuotaAdjusted,
    QuotaExpiring,
    QuotaGranted,
    QuotaThresholdCrossed,
    RoundClosed,
    RoundNoteAmended,
    UsageBatchRecorded,
    UsageRecorded,
)
from shared.events.matching import TaskMatched, TaskReadinessChanged, TaskUnmatchable
from shared.events.operator import OPERATOR_REQUESTS, NodeDrained, NodeUndrained, TaskPriorityChanged, TaskReleased

DISPATCHER = "dispatcher"
_DISPATCHER_FACETS = (
    TaskQueued, TaskHeld, TaskApproved, TaskDenied, TaskStarted, TaskCheckpointed, TaskSucceeded, TaskFailed, TaskRequeued,
    TaskCancelled, TaskDeadlineEndangered, TaskQuotaEndangered, TaskApprovalDelayed, LeaseGranted, LeaseRenewed, LeaseExpired, LeaseRevoked, LeaseReleased, NodeRegistered, NodeLost,
    TaskReleased, TaskPriorityChanged, NodeDrained, NodeUndrained,
)  # fmt: skip
_FACETS: dict[str, tuple[type[Envelope], ...]] = {
    "intake": (TaskSubmitted, TaskRejected, TaskCancelRequested, DataReadySignalled, TaskReviewed, TaskFlagCleared,
               DeadLetterReplayed, DeadLetterPurged, *OPERATOR_REQUESTS),  # the console's operator commands go through intake's outbox
    "readiness": (TaskReadinessChanged,),
    "matcher": (TaskMatched, TaskUnmatchable),
    DISPATCHER: _DISPATCHER_FACETS,
    "ledger": (UsageRecorded, UsageBatchRecorded, QuotaGranted, QuotaAdjusted, QuotaThresholdCrossed, QuotaExpiring, RoundClosed, RoundNoteAmended),
    "config": (ConfigChanged, TemplateChanged),
    "identity": (TokenCreated, TokenRevoked, AgentEnrolled, AgentUnenrolled),
}
OWNER_OF: dict[str, str] = {cls.model_fields["type"].default: owner for owner, classes in _FACETS.items() for cls in classes}
"""Event type -> the schema (service) whose outbox alone may hold it. Every catalogued event type
has one (tests/unit/test_event_ownership.py); a new type is added here with its owner."""

PRODUCERS: tuple[str, ...] = tuple(_FACETS)
"""Every owner, i.e. every `cf:events:<schema>` stream the gate reads."""


def producer_service(producer: str) -> str:
    """`dispatcher/local-123` -> `dispatcher`."""
    return producer.split("/", 1)[0]


def refused_producer(event: Envelope) -> str | None:
    """Why a consumer must not trust `event` (a dispatcher-owned type from another producer), or None.

    Only the dispatcher's facets are checked by producer name: other owners' events are rightly
    produced by other processes too (the console runs intake's cancel and identity's tokens)."""
    owner = OWNER_OF.get(event.type)
    if owner != DISPATCHER or producer_service(event.producer) == owner:
        return None
    return f"{event.type} is produced by the {owner} alone; this one claims producer {event.producer!r}"


def refusal(stream_owner: str, event_type: str) -> str | None:
    """Why the gate must not forward an event of `event_type` read from `stream_owner`'s stream, or None."""
    owner = OWNER_OF.get(event_type)
    if owner is None:
        return f"unknown event type {event_type!r} on the stream of {stream_owner}"
    if owner != stream_owner:
        return f"{event_type} is owned by {owner}; {stream_owner} may not write it"
    return None
