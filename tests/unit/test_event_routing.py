"""Type-routed delivery as data (shared.events.routing): where the gate appends each type, and that
each routed service parses exactly the types routed to it — a type it parses but nobody routes would
never reach it, so its subscription refuses to start."""

from __future__ import annotations

import pytest

from services.common.event_batches import UnroutedTypeError, events_stream_for
from services.matcher.batch import RELEVANT_TYPES as MATCHER_TYPES
from services.readiness.service import HANDLED_EVENTS as READINESS_TYPES
from shared.alerts import ALERTING_TYPES
from shared.events import LeaseRenewed, TaskSubmitted, TaskSucceeded
from shared.events.routing import ROUTES, forwarded_to, routing_table, type_name, unrouted_types
from shared.leasing.task_facets import RELEVANT as DISPATCHER_TYPES
from shared.names import ALERTS_GROUP, DISPATCHER_GROUP, EVENTS_STREAM, MATCHER_GROUP, READINESS_GROUP, routed_stream


@pytest.mark.parametrize(
    ("event_type", "streams"),
    [
        (b"task.submitted", (EVENTS_STREAM, "cf:routed:readiness", "cf:routed:matcher")),
        (b"task.succeeded", (EVENTS_STREAM, "cf:routed:readiness", "cf:routed:matcher", "cf:routed:alerts")),
        (b"lease.granted", (EVENTS_STREAM, "cf:routed:matcher")),
        (b"task.readiness_changed", (EVENTS_STREAM,)),  # folded only by groups that read cf:events
        (b"lease.renewed", (EVENTS_STREAM,)),
        (b"no.such_type", (EVENTS_STREAM,)),
    ],
)
def test_the_gate_appends_an_event_to_cf_events_first_then_to_the_groups_that_fold_its_type(
    event_type: bytes, streams: tuple[str, ...]
) -> None:
    assert forwarded_to(event_type) == streams


def test_a_routing_table_names_each_stream_once_per_type() -> None:
    table = routing_table({"a": (TaskSubmitted, TaskSubmitted, TaskSucceeded), "b": (TaskSucceeded,)})
    assert table == {b"task.submitted": (routed_stream("a"),), b"task.succeeded": (routed_stream("a"), routed_stream("b"))}


@pytest.mark.parametrize(
    ("group", "parsed"), [(READINESS_GROUP, READINESS_TYPES), (MATCHER_GROUP, MATCHER_TYPES), (ALERTS_GROUP, ALERTING_TYPES)]
)
def test_each_routed_group_is_routed_exactly_the_types_its_service_parses(group: str, parsed: tuple[type, ...]) -> None:
    assert {type_name(cls) for cls in ROUTES[group]} == {type_name(cls) for cls in parsed}
    assert events_stream_for(group, parsed) == routed_stream(group)


def test_a_routed_group_that_parses_a_type_not_routed_to_it_does_not_start() -> None:
    assert unrouted_types(ALERTS_GROUP, (TaskSucceeded, LeaseRenewed)) == ["lease.renewed"]
    with pytest.raises(UnroutedTypeError, match="lease.renewed"):
        events_stream_for(ALERTS_GROUP, (TaskSucceeded, LeaseRenewed))


def test_a_group_without_a_route_reads_cf_events() -> None:
    assert events_stream_for(DISPATCHER_GROUP, DISPATCHER_TYPES) == EVENTS_STREAM
