"""Which service may produce which event types, and the check consumers apply (pure).

The dispatcher alone decides what happens to a leased task: every task fact from `task.queued`
to `task.succeeded`, and every lease and node event (`shared.events.dispatch`,
`shared.events.leases`). A consumer refuses such an event from any other producer
(`refused_producer`), and the delivery pipeline dead-letters it with the reason, so a
`task.succeeded` written onto `cf:events` by anyone else is never believed.

An event's `producer` is `<service>/<instance>`. It is written by whoever appends the entry: this
check stops a service (or a script) that writes another's facet under its own name. It becomes
proof of origin only together with Redis users per service that alone may append what they own
(docs/RELIABILITY.md says what is enforced today).
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
from shared.events.envelope import Envelope
from shared.events.leases import LeaseExpired, LeaseGranted, LeaseReleased, LeaseRenewed, LeaseRevoked, NodeLost, NodeRegistered

DISPATCHER = "dispatcher"
_DISPATCHER_FACETS = (
    TaskQueued, TaskHeld, TaskApproved, TaskDenied, TaskStarted, TaskCheckpointed, TaskSucceeded, TaskFailed, TaskRequeued,
    TaskCancelled, TaskDeadlineEndangered, TaskQuotaEndangered, TaskApprovalDelayed, LeaseGranted, LeaseRenewed, LeaseExpired, LeaseRevoked, LeaseReleased, NodeRegistered, NodeLost,
)  # fmt: skip
OWNER_OF: dict[str, str] = {cls.model_fields["type"].default: DISPATCHER for cls in _DISPATCHER_FACETS}
"""Event type -> the only service that may produce it (types not listed are not checked here)."""


def producer_service(producer: str) -> str:
    """`dispatcher/local-123` -> `dispatcher`."""
    return producer.split("/", 1)[0]


def refused_producer(event: Envelope) -> str | None:
    """Why a consumer must not trust `event` (its type belongs to another service), or None."""
    owner = OWNER_OF.get(event.type)
    if owner is None or producer_service(event.producer) == owner:
        return None
    return f"{event.type} is produced by the {owner} alone; this one claims producer {event.producer!r}"
