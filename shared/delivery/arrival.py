"""When an entry reached its stream: Redis's own clock, read from the entry id.

A stream entry id is `<milliseconds>-<sequence>`, the milliseconds taken from the Redis server's
clock when the entry was appended. That is the one time a consumer can know about an entry that
neither its producer's clock nor the consumer's own lag moves: a report an agent wrote before
its run ended reached the stream before the end, however late the dispatcher reads it.

    @reliable_batch_subscriber(broker, stream=REPORTS_STREAM, parse=with_arrival(parse_report),
                               parse_entry=True, ...)
    async def on_reports(arrived: list[Arrived[AgentReport]]) -> None: ...

The delivery steps treat an `Arrived` like the envelope it carries (the producer check of
`shared.delivery.consumer` applies to `arrived.envelope`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Generic, TypeVar

from shared.delivery.wire import BODY_FIELD, extract_body
from shared.events.envelope import Envelope

if TYPE_CHECKING:
    from shared.delivery.entry_steps import Entry

E = TypeVar("E", bound=Envelope)


@dataclass(frozen=True, slots=True)
class Arrived(Generic[E]):
    """An event and when its entry was appended to the stream it was read from."""

    envelope: E
    arrived_at: datetime


def appended_at(entry_id: str) -> datetime:
    """When Redis appended the entry `entry_id` (`"1700000000123-0"` -> 2023-11-14 22:13:20.123 UTC)."""
    milliseconds, _, _ = entry_id.partition("-")
    return datetime.fromtimestamp(int(milliseconds) / 1000, tz=UTC)


def with_arrival(parse: Callable[[bytes], E], body_field: str = BODY_FIELD) -> Callable[[Entry], Arrived[E]]:
    """A `parse_entry=True` parser: `parse` of the entry's body, with the entry's `appended_at`."""

    def parse_arrived(entry: Entry) -> Arrived[E]:
        return Arrived(parse(extract_body(entry.fields, body_field)), appended_at(entry.entry_id))

    return parse_arrived
