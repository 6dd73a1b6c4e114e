"""The catalog of every event type: the `Event` union, `EVENT_TYPES`, and `make_event`.

Adding an event type = a payload + an `Envelope` subclass in its owner's module, listed here once.
The JSON Schema snapshot test then fails until the snapshot is regenerated, so a contract never
changes unnoticed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Union, get_args

from pydantic import Field, TypeAdapter

from shared.events.config import ConfigChanged, TemplateChanged
from shared.events.dispatch import (
    TaskApprovalDelayed,
    TaskApproved,
    TaskCancelled,
    TaskDeadlineEndangered,
    TaskDenied,
    TaskCheckpointed,
    TaskFailed,
    TaskHeld,
    TaskQueued,
    TaskQuotaEndangered,
    TaskRequeued,
    TaskStarted,
    TaskSucceeded,
)
from shared.events.envelope import Envelope, Payload, utcnow
from shared.events.deadletters import DeadLetterPurged, DeadLetterReplayed
from shared.events.identity import AgentEnrolled, AgentUnenrolled, TokenCreated, TokenRevoked
from shared.events.intake import (
    DataReadySignalled,
    TaskCancelRequested,
    TaskFlagCleared,
    TaskRejected,
    TaskReviewed,
    TaskSubmitted,
)
from shared.events.leases import (
    LeaseExpired,
    LeaseGranted,
    LeaseReleased,
    LeaseRenewed,
    LeaseRevoked,
    NodeLost,
    NodeRegistered,
)
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
from shared.events.operator import (
    NodeDrained,
    NodeDrainRequested,
    NodeUndrained,
    NodeUndrainRequested,
    TaskHoldRequested,
    TaskPriorityChanged,
    TaskPriorityChangeRequested,
    TaskReleased,
    TaskReleaseRequested,
    TaskRequeueRequested,
)
from shared.events.reports import AgentCommand, AgentReport

Event = Annotated[
    Union[
        # intake
        TaskSubmitted, TaskRejected, TaskCancelRequested, TaskReviewed, TaskFlagCleared, DataReadySignalled,
        # readiness, matcher
        TaskReadinessChanged, TaskMatched, TaskUnmatchable,
        # dispatcher: tasks
        TaskQueued, TaskHeld, TaskApproved, TaskDenied, TaskStarted, TaskCheckpointed, TaskSucceeded, TaskFailed,
        TaskRequeued, TaskCancelled, TaskDeadlineEndangered, TaskQuotaEndangered, TaskApprovalDelayed,
        # dispatcher: leases and nodes
        LeaseGranted, LeaseRenewed, LeaseExpired, LeaseRevoked, LeaseReleased, NodeRegistered, NodeLost,
        # ledger
        UsageRecorded, UsageBatchRecorded, QuotaGranted, QuotaAdjusted, QuotaThresholdCrossed, QuotaExpiring, RoundClosed,
        RoundNoteAmended,
        # config
        ConfigChanged, TemplateChanged,
        # identity (the console process)
        TokenCreated, TokenRevoked, AgentEnrolled, AgentUnenrolled,
        # operators' dead-letter actions (the console's API, through intake's outbox)
        DeadLetterReplayed, DeadLetterPurged,
        # operators' verbs: requests (the console's API, through intake's outbox), the dispatcher's answers
        TaskHoldRequested, TaskReleaseRequested, TaskRequeueRequested, TaskPriorityChangeRequested,
        NodeDrainRequested, NodeUndrainRequested, TaskReleased, TaskPriorityChanged, NodeDrained, NodeUndrained,
    ],
    Field(discriminator="type"),
]
"""Any cardflow event; pydantic picks the class from `type`."""

EVENT_CLASSES: tuple[type[Envelope], ...] = get_args(get_args(Event)[0])

EVENT_TYPES: dict[str, type[Envelope]] = {cls.model_fields["type"].default: cls for cls in EVENT_CLASSES}
"""Event type string -> event class, e.g. `"lease.granted"` -> `LeaseGranted`."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def _by_type(union: Any) -> dict[str, type[Envelope]]:
    return {cls.model_fields["type"].default: cls for cls in get_args(get_args(union)[0])}


REPORT_TYPES: dict[str, type[Envelope]] = _by_type(AgentReport)
"""Report type -> class for what agents write to `cf:reports` (not events)."""

COMMAND_TYPES: dict[str, type[Envelope]] = _by_type(AgentCommand)
"""Command type -> class for what the dispatcher writes to agent inboxes (not events)."""

MESSAGE_TYPES: dict[str, type[Envelope]] = EVENT_TYPES | REPORT_TYPES | COMMAND_TYPES
"""Every envelope type: events, reports and commands (their type strings never overlap)."""


CURRENT_SCHEMA_VERSIONS: dict[str, int] = {
    message_type: cls.model_fields["schema_version"].default for message_type, cls in MESSAGE_TYPES.items()
}
"""Type -> the schema version this code writes (read once: every parse asks, and pydantic's
`model_fields` costs ~1.7 us a look)."""


def current_schema_version(message_type: str) -> int:
    """The schema version this code writes for `message_type` (older ones are upcast on parse)."""
    return CURRENT_SCHEMA_VERSIONS[message_type]


def event_class(cls_or_type: type[Envelope] | str) -> type[Envelope]:
    """The class of an event, report or command type (or the class itself, if catalogued).

    KeyError names the known types when it is unknown.
    """
    if isinstance(cls_or_type, str):
        if cls_or_type not in MESSAGE_TYPES:
            raise KeyError(f"unknown event type {cls_or_type!r}; known: {', '.join(sorted(MESSAGE_TYPES))}")
        return MESSAGE_TYPES[cls_or_type]
    if MESSAGE_TYPES.get(cls_or_type.model_fields["type"].default) is not cls_or_type:
        raise KeyError(f"{cls_or_type.__name__} is not listed in shared.events.catalog")
    return cls_or_type


def make_event(
    cls_or_type: type[Envelope] | str,
    *,
    subject: str,
    subject_seq: int,
    producer: str,
    actor: str,
    data: Payload | dict[str, Any],
    correlation_id: str | None = None,
    causation_id: str | None = None,
    occurred_at: datetime | None = None,
) -> Event:
    """A new event (fresh ULID, current schema version); pydantic validates `data`.

    Also builds agent reports and commands (`LeaseGrantCommand`, ...), which share the envelope.
    `occurred_at` defaults to now; the simulator and replays pass their own clock's time.
    """
    cls = event_class(cls_or_type)
    payload_class = cls.model_fields["data"].annotation
    if isinstance(data, Payload) and not isinstance(data, payload_class):
        raise TypeError(f"{cls.__name__} carries {payload_class.__name__}, not {type(data).__name__}")
    return cls(
        subject=subject,
        subject_seq=subject_seq,
        producer=producer,
        actor=actor,
        data=data,
        correlation_id=correlation_id,
        causation_id=causation_id,
        occurred_at=occurred_at or utcnow(),
    )


def caused_by(cause: Envelope) -> dict[str, str]:
    """Correlation and causation ids for an event caused by `cause`: `make_event(..., **caused_by(e))`.

    The correlation id stays that of the first event of the chain (or the cause's own id).
    """
    return {"correlation_id": cause.correlation_id or cause.event_id, "causation_id": cause.event_id}
