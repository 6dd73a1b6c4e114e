"""Dead letters for operators: list and show `cf:deadletter`, replay an entry onto its stream, purge.

Each replay or purge is recorded as an event (`deadletter.replayed` / `deadletter.purged`, through
intake's outbox) with the operator as actor and their reason, in one PostgreSQL transaction that
also performs the Redis change: if Redis refuses, nothing is recorded; the event commits right after
the Redis change (a crash between the two is the one way an action goes unrecorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import Emitter
from shared.delivery.deadletter import DeadLetter, parse_deadletter, read_deadletters, replay_deadletter
from shared.events import Emission, Envelope
from shared.events.deadletters import (
    DeadLetterPurged,
    DeadLetterPurgedData,
    DeadLetterReplayed,
    DeadLetterReplayedData,
)
from shared.events.subjects import deadletter_subject
from shared.names import DEADLETTER_STREAM

MAX_LISTED = 1000


class NoSuchDeadLetter(KeyError):
    """No entry of that id in cf:deadletter (maybe replayed or purged already)."""


@dataclass(frozen=True)
class DeadLetterView:
    """A dead-letter entry as the API shows it (the original fields as text)."""

    deadletter_id: str
    stream: str
    group: str
    consumer: str
    entry_id: str
    reason: str
    deliveries: int
    error: str
    dead_at: str
    original: dict[str, str]

    @classmethod
    def of(cls, dead: DeadLetter) -> DeadLetterView:
        original = {key.decode(errors="replace"): value.decode(errors="replace") for key, value in dead.original.items()}
        return cls(dead.deadletter_id, dead.stream, dead.group, dead.consumer, dead.entry_id, dead.reason,
                   dead.deliveries, dead.error, dead.dead_at, original)  # fmt: skip


async def list_deadletters(redis: Redis, *, stream: str | None = None, limit: int = 100) -> list[DeadLetterView]:
    """The oldest `limit` dead entries (of one source stream, when given)."""
    entries = await read_deadletters(redis, count=MAX_LISTED)
    return [DeadLetterView.of(dead) for dead in entries if stream is None or dead.stream == stream][:limit]


async def load_deadletter(redis: Redis, deadletter_id: str) -> DeadLetter:
    entries = await redis.xrange(DEADLETTER_STREAM, min=deadletter_id, max=deadletter_id)
    if not entries:
        raise NoSuchDeadLetter(deadletter_id)
    return parse_deadletter(deadletter_id, entries[0][1])


async def replay(conn: asyncpg.Connection, redis: Redis, emitter: Emitter, deadletter_id: str, reason: str) -> Envelope:
    """Put the entry back on its stream and record `deadletter.replayed`, in the caller's transaction."""
    dead = await load_deadletter(redis, deadletter_id)
    new_id = await replay_deadletter(redis, deadletter_id)
    data = DeadLetterReplayedData(deadletter_id=deadletter_id, stream=dead.stream, entry_id=dead.entry_id,
                                  replayed_as=new_id, reason=reason)  # fmt: skip
    [event] = await emitter.emit(conn, [Emission(DeadLetterReplayed, deadletter_subject(deadletter_id), data)])
    return event


async def purge(
    conn: asyncpg.Connection, redis: Redis, emitter: Emitter, *, reason: str, ids: list[str] | None = None,
    dead_before: datetime | None = None,
) -> list[Envelope]:  # fmt: skip
    """Delete the named entries, or every entry dead before `dead_before`; one `deadletter.purged` each."""
    if ids:
        chosen = [await load_deadletter(redis, deadletter_id) for deadletter_id in ids]
    elif dead_before is not None:
        cutoff = f"{int(dead_before.timestamp() * 1000)}-0"
        chosen = [dead for dead in await read_deadletters(redis, count=100_000) if _id_before(dead.deadletter_id, cutoff)]
    else:
        raise ValueError("name the entries to purge, or a time before which every dead entry is purged")
    if not chosen:
        return []
    await redis.xdel(DEADLETTER_STREAM, *[dead.deadletter_id for dead in chosen])
    emissions = [
        Emission(DeadLetterPurged, deadletter_subject(dead.deadletter_id), DeadLetterPurgedData(
            deadletter_id=dead.deadletter_id, stream=dead.stream, entry_id=dead.entry_id, dead_reason=dead.reason,
            reason=reason,
        ))
        for dead in chosen
    ]  # fmt: skip
    return await emitter.emit(conn, emissions)


def _id_before(entry_id: str, cutoff: str) -> bool:
    millis, _, seq = entry_id.partition("-")
    cut_millis, _, cut_seq = cutoff.partition("-")
    return (int(millis), int(seq or 0)) < (int(cut_millis), int(cut_seq or 0))
