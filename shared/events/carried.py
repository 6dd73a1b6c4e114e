"""`carried_events`: the transitions an event carries for another, as the events they stand for.

A `lease.granted` may carry its task's entry into the queue (`queued`) and a `task.succeeded` or
`task.failed` its run's start (`started`) instead of a `task.queued` / `task.started` of their own (see
`shared.events.dispatch`). Whoever tells a task's history step by step (the audit story, its
Chinese retelling) tells those transitions with their own sentences, as if their events had come
just before the carrier:

    for told in (*carried_events(event), event): ...

The events returned are for telling only: each shares its carrier's event id, time, producer,
actor, links and subject sequence number (so it is never a new fact, nor archived or published).
Folding them through `shared.projection.evolve` would be wrong — the projection applies a
carrier's transitions itself.
"""

from __future__ import annotations

from typing import Any

from shared.events.dispatch import TaskQueued, TaskStarted
from shared.events.envelope import Envelope
from shared.events.subjects import task_subject


RUN_ENDS_CARRYING_START = frozenset({"task.succeeded", "task.failed"})
"""The events that may carry their run's start (`started`)."""


def carried_events(event: Envelope) -> tuple[Envelope, ...]:
    """The `task.queued` / `task.started` `event` carries, rebuilt (empty when it carries none)."""
    data = event.data
    if event.type == "lease.granted" and data.queued is not None:
        return (_told_as(event, TaskQueued, {"task_id": data.task_id, **data.queued.model_dump()}),)
    if event.type in RUN_ENDS_CARRYING_START and data.started is not None:
        facts = {"task_id": data.task_id, "lease_id": data.lease_id, **data.started.model_dump()}
        return (_told_as(event, TaskStarted, facts),)
    return ()


def _told_as(carrier: Envelope, kind: type[Envelope], data: dict[str, Any]) -> Envelope:
    envelope = carrier.model_dump(exclude={"type", "subject", "schema_version", "data"})
    return kind.model_validate({**envelope, "subject": task_subject(data["task_id"]), "data": data})
