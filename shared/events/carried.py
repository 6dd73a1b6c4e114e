"""`carried_events`: the transitions an event carries for another, as the events they stand for.

A `lease.granted` may carry its task's entry into the queue (`queued`), and a `task.succeeded` or
`task.failed` its run's start (`started`) and its lease's end (`released`), instead of a `task.queued` /
`task.started` / `lease.released` of their own (see `shared.events.dispatch`). Whoever tells a task's
history step by step (the audit story, its Chinese retelling) tells those transitions with their own
sentences, as if their events had come just before the carrier:

    for told in (*carried_events(event), event): ...

A `usage.batch_recorded` carries one `usage.recorded` per lease a ledger batch accounted for a project
(`carried_usage`, `with_carried_usage`); whoever folds usage per lease (the dispatcher's quota counts, the
views' task views, audit replay and verify, the audit story) reads those instead of the carrier.

The events returned share their carrier's event id, time, producer, actor, links and subject sequence
number (so each is never a new fact, nor archived or published). A carried `usage.recorded` has the
subject `usage/<project>/<lease id>` (`carried_usage_subject`), which only the projection's "already
applied?" test reads (per owner and subject, by number): the ledger numbers a project's carriers in
commit order and says at most one slice of a lease in each, so a lease's slices come with rising numbers,
and a repeated carrier is seen as applied — apart from the numbers of the `lease/<id>` usage events
written on their own before, and from a lease's slices booked to `unknown` before its task was seen. Folding a carried start or queue
entry through `shared.projection.evolve` would be wrong — the projection applies a carrier's task
transitions itself. A carried release is a lease's end, which the projection does not fold: the folds
of lease ends (the ledger's accounts, the views' lease rows, audit replay) apply it as the event it
stands for (`carried_release`, `with_carried_releases`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.events.dispatch import TaskQueued, TaskStarted
from shared.events.envelope import Envelope
from shared.events.leases import LeaseReleased, LeaseReleasedData
from shared.events.ledger import UsageRecorded, UsageRecordedData
from shared.events.subjects import lease_subject, task_subject


RUN_ENDS = frozenset({"task.succeeded", "task.failed"})
"""The events that may carry their run's start (`started`) and their lease's end (`released`)."""


def carried_events(event: Envelope) -> tuple[Envelope, ...]:
    """The `task.queued`, or the `task.started` and `lease.released`, `event` carries, rebuilt in the order
    their own events would have come (empty when it carries none)."""
    data = event.data
    if event.type == "lease.granted" and data.queued is not None:
        return (_told_as(event, TaskQueued, task_subject(data.task_id), {"task_id": data.task_id,
                                                                          **data.queued.model_dump()}),)
    if event.type not in RUN_ENDS:
        return ()
    told = []
    if data.started is not None:
        facts = {"task_id": data.task_id, "lease_id": data.lease_id, **data.started.model_dump()}
        told.append(_told_as(event, TaskStarted, task_subject(data.task_id), facts))
    if (release := carried_release(event)) is not None:
        told.append(release)
    return tuple(told)


def carries_release(event: Envelope) -> bool:
    """True if `event` is a run's end that carries its lease's end (its `lease_id` and `task_id` are the release's)."""
    return event.type in RUN_ENDS and event.data.released is not None


def carried_release(event: Envelope) -> LeaseReleased | None:
    """The `lease.released` a run's end carries, rebuilt (None when `event` carries none)."""
    if not carries_release(event):
        return None
    data = event.data  # validated with its carrier: built without validating again (folds call this often)
    facts = LeaseReleasedData.model_construct(lease_id=data.lease_id, task_id=data.task_id, **dict(data.released))
    return LeaseReleased.model_construct(**_carrier_fields(event), subject=lease_subject(data.lease_id), data=facts)


def with_carried_releases(events: Iterable[Envelope]) -> list[Envelope]:
    """`events` with every carried `lease.released` just before its carrier, where its own event would have
    been: what a fold of lease ends reads instead of `events`."""
    unfolded: list[Envelope] = []
    for event in events:
        if (release := carried_release(event)) is not None:
            unfolded.append(release)
        unfolded.append(event)
    return unfolded


USAGE_CARRIER = "usage.batch_recorded"
"""The event that carries `usage.recorded`s (one per lease)."""


def carried_usage(event: Envelope, task_id: str | None = None) -> tuple[UsageRecorded, ...]:
    """The `usage.recorded` of each lease a `usage.batch_recorded` carries, in its order (empty for any other
    event); with `task_id`, only those of that task's leases."""
    if event.type != USAGE_CARRIER:
        return ()
    envelope = _carrier_fields(event)
    project = event.data.project  # validated with its carrier: built without validating again
    return tuple(
        UsageRecorded.model_construct(**envelope, subject=carried_usage_subject(event.subject, piece.lease_id),
                                      data=UsageRecordedData.model_construct(project=project, **dict(piece)))
        for piece in event.data.slices if task_id is None or piece.task_id == task_id
    )  # fmt: skip


def carried_usage_subject(carrier_subject: str, lease_id: str) -> str:
    """`usage/<project>/<lease id>`: the subject of a lease's slice its project's carrier says (the module
    docstring says why not `lease/<id>`)."""
    return f"{carrier_subject}/{lease_id}"


def with_carried_usage(events: Iterable[Envelope]) -> list[Envelope]:
    """`events` with every `usage.batch_recorded` replaced by the `usage.recorded`s it carries: what a fold of
    usage per lease reads instead of `events`."""
    unfolded: list[Envelope] = []
    for event in events:
        unfolded.extend(carried_usage(event) if event.type == USAGE_CARRIER else (event,))
    return unfolded


def fold_order(event: Envelope) -> tuple[Envelope, ...]:
    """What a fold of task views, usage and lease ends applies for `event`, in order: the `usage.recorded`
    slices it carries, `event` itself, then the `lease.released` it carries (the projection ignores a
    release, and no fold has a rule for a run's end of its own, so the release's place after its carrier
    changes nothing) — the order `shared.replay`, the demo board and audit verify fold in."""
    release = carried_release(event)
    return (*carried_usage(event), event) if release is None else (*carried_usage(event), event, release)


_OWN_FIELDS = frozenset({"type", "subject", "schema_version", "data"})
"""The envelope fields a told event does not take from its carrier."""


def _carrier_fields(event: Envelope) -> dict[str, Any]:
    """The envelope fields a carried event shares with its carrier (all but `_OWN_FIELDS`), as they are."""
    return {name: value for name, value in event if name not in _OWN_FIELDS}


def _told_as(carrier: Envelope, kind: type[Envelope], subject: str, data: dict[str, Any]) -> Envelope:
    envelope = carrier.model_dump(exclude=_OWN_FIELDS)
    return kind.model_validate({**envelope, "subject": subject, "data": data})
