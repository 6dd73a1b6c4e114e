"""Type-routed delivery: the consumer groups that read a copy of `cf:events` holding only their types.

Every consumer group on `cf:events` receives every entry, and most groups fold few of the types:
readiness two of the ~7.4 events a task makes, the ledger's alerter one. A routed group reads its own
stream instead (`shared.names.routed_stream`): the gate appends each event it forwards to `cf:events`
and, in the same MULTI, to the routed stream of every group in `ROUTES` whose types include it
(`forwarded_to`). So a routed stream holds exactly the events of its types, in `cf:events` order,
each once: the MULTI commits both appends or neither, and only the gate writes either stream.

`cf:events` itself is unchanged (the audit archive, the views, the ledger and the dispatcher read it).
A group's subscription checks at start that every type it parses is routed to it
(`unrouted_types`), so a type added to a service but not here stops that service from starting
instead of being silently missed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.alerts import ALERTING_TYPES
from shared.events import (
    ConfigChanged,
    DataReadySignalled,
    Envelope,
    LeaseGranted,
    NodeLost,
    NodeRegistered,
    TaskCancelled,
    TaskFailed,
    TaskRejected,
    TaskSubmitted,
    TaskSucceeded,
)
from shared.names import ALERTS_GROUP, EVENTS_STREAM, MATCHER_GROUP, READINESS_GROUP, routed_stream

ROUTES: Mapping[str, tuple[type[Envelope], ...]] = {
    READINESS_GROUP: (TaskSubmitted, DataReadySignalled, TaskCancelled, TaskRejected, TaskSucceeded, TaskFailed),
    MATCHER_GROUP: (TaskSubmitted, NodeRegistered, NodeLost, TaskCancelled, ConfigChanged, LeaseGranted, TaskSucceeded,
                    TaskFailed, TaskRejected),
    ALERTS_GROUP: ALERTING_TYPES,
}  # fmt: skip
"""Routed consumer group -> the event types its service folds (every other type it would skip
unparsed). Groups not named here read `cf:events`. Chosen by what a skipped delivery costs against
the gate's extra append (docs/BENCHMARKS.md, Pipeline, session 13)."""


def type_name(event_class: type[Envelope]) -> str:
    """The wire `type` of an event class (`task.submitted`)."""
    return str(event_class.model_fields["type"].default)


def routing_table(routes: Mapping[str, Iterable[type[Envelope]]]) -> dict[bytes, tuple[str, ...]]:
    """Wire type (as the entry's `type` field holds it) -> the routed streams it is appended to (pure)."""
    table: dict[bytes, list[str]] = {}
    for group, classes in routes.items():
        for name in dict.fromkeys(type_name(cls) for cls in classes):
            table.setdefault(name.encode(), []).append(routed_stream(group))
    return {name: tuple(streams) for name, streams in table.items()}


ROUTING_TABLE = routing_table(ROUTES)
"""`routing_table(ROUTES)`: what the gate appends where, besides `cf:events`."""


def forwarded_to(event_type: bytes, table: Mapping[bytes, tuple[str, ...]] = ROUTING_TABLE) -> tuple[str, ...]:
    """Where the gate appends an event of wire type `event_type`: `cf:events`, then the routed streams of
    the groups that fold the type (none for most types)."""
    return (EVENTS_STREAM, *table.get(event_type, ()))


def unrouted_types(group: str, parsed: Iterable[type[Envelope]]) -> list[str]:
    """The types `group` parses that are not routed to it (empty: its routed stream carries all of them)."""
    routed = {type_name(cls) for cls in ROUTES.get(group, ())}
    return sorted({type_name(cls) for cls in parsed} - routed)


def is_routed(group: str) -> bool:
    """Does `group` read its own routed stream instead of `cf:events`?"""
    return group in ROUTES
