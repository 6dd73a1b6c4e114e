"""The dead-letter stream: entries that could not be processed, with why, and how to replay them.

A dead-letter entry (in `cf:deadletter`) has these fields:

    stream, group, consumer, entry_id   where the entry came from and who gave up on it
    reason                              invalid (unparseable: never retried) | failed (handler
                                        raised on its last allowed delivery) | exhausted (delivered
                                        max times without an ack: the consumer kept dying)
    deliveries                          deliveries so far (XPENDING's count)
    error                               exception type and message (empty for `exhausted`)
    dead_at                             UTC time, ISO 8601
    orig:<field>                        every original field, byte for byte

Writing it and acking the original happen in one MULTI, so an entry is never both lost and
unrecorded. `replay_deadletter` puts the original fields back on the original stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from redis.asyncio import Redis

from shared.names import DEADLETTER_STREAM

ORIGINAL_PREFIX = b"orig:"
MAX_ERROR_CHARS = 4000


class DeadReason(StrEnum):
    INVALID = "invalid"
    FAILED = "failed"
    EXHAUSTED = "exhausted"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-letter entry as read back from the stream."""

    deadletter_id: str
    stream: str
    group: str
    consumer: str
    entry_id: str
    reason: str
    deliveries: int
    error: str
    dead_at: str
    original: dict[bytes, bytes]


@dataclass(frozen=True, slots=True)
class DeadLetterSource:
    """Where a dead entry came from."""

    stream: str
    group: str
    consumer: str
    entry_id: str


def deadletter_fields(
    source: DeadLetterSource,
    original: Mapping[bytes, bytes],
    reason: DeadReason,
    deliveries: int,
    error: BaseException | str | None,
) -> dict[bytes | str, bytes | str]:
    """The fields of the dead-letter entry for `original` (see module docstring)."""
    fields: dict[bytes | str, bytes | str] = {
        "stream": source.stream,
        "group": source.group,
        "consumer": source.consumer,
        "entry_id": source.entry_id,
        "reason": reason.value,
        "deliveries": str(deliveries),
        "error": describe_error(error),
        "dead_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    fields.update({ORIGINAL_PREFIX + key: value for key, value in original.items()})
    return fields


def describe_error(error: BaseException | str | None) -> str:
    if error is None:
        return ""
    text = error if isinstance(error, str) else f"{type(error).__qualname__}: {error}"
    return text[:MAX_ERROR_CHARS]


async def deadletter_and_ack(
    redis: Redis,
    source: DeadLetterSource,
    fields: Mapping[bytes | str, bytes | str],
    deadletter_stream: str = DEADLETTER_STREAM,
) -> None:
    """Append the dead-letter entry and ack the original in one MULTI/EXEC."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(deadletter_stream, dict(fields))
        pipe.xack(source.stream, source.group, source.entry_id)
        await pipe.execute()


async def read_deadletters(
    redis: Redis, *, count: int = 100, start: str = "-", deadletter_stream: str = DEADLETTER_STREAM
) -> list[DeadLetter]:
    """Up to `count` dead-letter entries from `start` on, oldest first."""
    entries = await redis.xrange(deadletter_stream, min=start, count=count)
    return [parse_deadletter(_text(entry_id), fields) for entry_id, fields in entries]


def parse_deadletter(deadletter_id: str, fields: Mapping[bytes, bytes]) -> DeadLetter:
    def get(name: str) -> str:
        return _text(fields.get(name.encode(), b""))

    original = {k[len(ORIGINAL_PREFIX) :]: v for k, v in fields.items() if k.startswith(ORIGINAL_PREFIX)}
    return DeadLetter(
        deadletter_id=deadletter_id,
        stream=get("stream"),
        group=get("group"),
        consumer=get("consumer"),
        entry_id=get("entry_id"),
        reason=get("reason"),
        deliveries=int(get("deliveries") or 0),
        error=get("error"),
        dead_at=get("dead_at"),
        original=original,
    )


async def replay_deadletter(
    redis: Redis, deadletter_id: str, *, deadletter_stream: str = DEADLETTER_STREAM
) -> str:
    """Re-append a dead entry's original fields to its stream and remove it from the dead-letter.

    Every group of that stream sees the entry again (streams cannot target one group);
    consumers dedupe by event_id, so groups that had applied it skip it. Returns the new entry id.
    """
    entries = await redis.xrange(deadletter_stream, min=deadletter_id, max=deadletter_id)
    if not entries:
        raise KeyError(f"no dead-letter entry {deadletter_id}")
    dead = parse_deadletter(deadletter_id, entries[0][1])
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(dead.stream, dict(dead.original))
        pipe.xdel(deadletter_stream, deadletter_id)
        new_id, _ = await pipe.execute()
    return _text(new_id)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
