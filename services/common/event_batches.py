"""Batch consumers of `cf:events` that fold only some event types (readiness, matcher, ledger).

- `events_stream_for`: where a group reads its events — its routed stream if the gate routes one to
  it (`shared.events.routing`), else `cf:events`;
- `subscribe_event_batches`: one reliable batch subscriber in the service's group on that stream;
  entries of other types are skipped unparsed (`parse_events_of`);
- `once_per_id`: the events of the wanted types, each event id once (a batch may hold a redelivery);
- `not_yet_handled`: record events in the service's inbox, in the caller's transaction; the ones
  seen for the first time (the others were handled already), plus those of idempotent types (or
  events a predicate calls repeatable) that skip the inbox.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from services.common.runtime import ServiceContext, SkippedEntry, parse_events_of
from shared.delivery.consumer import reliable_batch_subscriber
from shared.delivery.inbox import record_consumed_many
from shared.events import Envelope
from shared.events.routing import is_routed, unrouted_types
from shared.names import EVENTS_STREAM, routed_stream

BatchHandler = Callable[[list[Envelope | SkippedEntry]], Awaitable[None]]


class UnroutedTypeError(LookupError):
    """A routed group parses a type the gate does not route to it: it would never see such an event."""


def events_stream_for(group: str, types: tuple[type[Envelope], ...]) -> str:
    """The stream `group` reads its `types` from: its routed stream if it has one (which must carry every
    one of `types`, else `UnroutedTypeError` at start), else `cf:events`."""
    if not is_routed(group):
        return EVENTS_STREAM
    missing = unrouted_types(group, types)
    if missing:
        raise UnroutedTypeError(f"group {group!r} parses {', '.join(missing)}, which the gate does not route to "
                                f"{routed_stream(group)}: add them to shared.events.routing.ROUTES")  # fmt: skip
    return routed_stream(group)


def subscribe_event_batches(
    ctx: ServiceContext, *, group: str, types: tuple[type[Envelope], ...], batch_size: int, handle: BatchHandler,
    linger_ms: int = 0,
) -> None:
    """Consume the events of `group` (`events_stream_for`), up to `batch_size` entries at a time; only `types`
    are parsed; `linger_ms` lets batches gather (`shared.delivery.consumer.OFF_PATH_LINGER_MS`)."""
    reliable_batch_subscriber(
        ctx.broker, stream=events_stream_for(group, types), group=group, parse=parse_events_of(*types),
        parse_entry=True, max_records=batch_size, linger_ms=linger_ms,
    )(handle)  # fmt: skip


def once_per_id(events: Sequence[Envelope | SkippedEntry], types: tuple[type[Envelope], ...]) -> list[Any]:
    """The events of `types`, in batch order, each event id once."""
    return list({e.event_id: e for e in events if isinstance(e, types)}.values())


async def not_yet_handled(
    conn: asyncpg.Connection, ctx: ServiceContext, events: Sequence[Any], *, always: tuple[type[Envelope], ...] = (),
    repeatable: Callable[[Any], bool] = lambda _event: False,
) -> list[Any]:
    """`events` (in order) this service has not consumed before; events of `always`, and those `repeatable`
    says are safe to fold again, skip the inbox."""
    skips = [isinstance(e, always) or repeatable(e) for e in events]
    recorded = [e.event_id for e, skip in zip(events, skips, strict=True) if not skip]
    fresh = await record_consumed_many(conn, ctx.schema, ctx.spec.name, recorded) if recorded else set()
    return [e for e, skip in zip(events, skips, strict=True) if skip or e.event_id in fresh]
