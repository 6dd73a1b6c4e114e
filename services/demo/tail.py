"""Follow `cf:events` from the beginning, parsed: for the live view, tests and benchmarks.

A plain XREAD cursor, not a consumer group: it reads the whole log from `start` (default: the
first entry), acknowledges nothing and changes nothing, so any number of observers can follow
the system without disturbing it. Entries that do not parse are counted and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from shared.delivery.wire import extract_body
from shared.events import Envelope, EventParseError, parse_event
from shared.names import EVENTS_STREAM


@dataclass
class EventTail:
    """`await tail.read()` returns the events appended since the previous call, in stream order."""

    redis: Redis
    stream: str = EVENTS_STREAM
    last_id: str = "0"
    unreadable: int = 0

    async def read(self, *, block_ms: int | None = 200, count: int = 5000) -> list[Envelope]:
        """New events (waits up to `block_ms` when there are none; None = do not wait)."""
        events, _ = await self._read(block_ms, count)
        return events

    async def read_all(self, *, count: int = 5000) -> list[Envelope]:
        """Everything appended since the previous call, without waiting."""
        events: list[Envelope] = []
        while True:
            batch, entries = await self._read(None, count)
            events += batch
            if entries < count:
                return events

    async def _read(self, block_ms: int | None, count: int) -> tuple[list[Envelope], int]:
        answer = await self.redis.xread({self.stream: self.last_id}, count=count, block=block_ms)
        events: list[Envelope] = []
        entries = 0
        for _stream, batch in answer or ():
            for entry_id, fields in batch:
                entries += 1
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                event = self._parse(fields)
                if event is not None:
                    events.append(event)
        return events, entries

    def _parse(self, fields: dict[bytes, bytes]) -> Envelope | None:
        try:
            return parse_event(extract_body(fields))
        except (EventParseError, ValueError):
            self.unreadable += 1
            return None
