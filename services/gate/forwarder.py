"""The gate's forwarding step: each service's own event stream -> `cf:events`, owner checked.

Every service's outbox relay appends its events to `cf:events:<schema>`, which only that
service's Redis user may write (shared.redis_acl). One `forward_once` call:

1. make sure this instance holds the gate lock (`cf:gate:lock`, SET NX PX): only one instance
   forwards at a time, so each producer's events reach `cf:events` in the order it wrote them.
   A leader whose lock was set or renewed less than a third of its TTL ago (by this process's
   clock, from before the command was sent) still holds it and asks nobody: at low rates each
   event is a step of its own, and the two round trips of asking were a third of the gate's;
2. read up to `batch_size` entries of every producer stream in one XREADGROUP (group `gate`, one
   consumer name for every instance; after a restart or a lost race, the entries it had read but
   not acked are read again first);
3. screen each entry (pure, `screen_entry`): its body's type must be owned by the stream's owner
   (shared.events.ownership.refusal) and equal the entry's `type` field; unreadable bodies fail;
4. in ONE MULTI, guarded by WATCH on the lock: XADD the accepted entries to `cf:events` (fields
   unchanged), each also to the routed stream of every group that folds its type
   (shared.events.routing: those groups read only their own stream; one EVAL of `FAN_OUT` appends a
   routed event to all its streams), XADD the refused ones to
   `cf:deadletter` with the reason, XACK them all, and renew the lock. An instance that lost the
   lock meanwhile commits nothing (WatchError); an entry is forwarded exactly once, to `cf:events`
   and to each of its routed streams, in the same order everywhere.

A gracefully stopped instance releases the lock (`release`, only if it is still its own), so a
restart or another instance takes over at once; a killed one leaves it to expire after its TTL.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from itertools import chain
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from shared.delivery.deadletter import DeadLetterSource, DeadReason, deadletter_fields
from shared.delivery.wire import BODY_FIELD, ensure_group
from shared.events.ownership import PRODUCERS, refusal
from shared.events.routing import ROUTING_TABLE, forwarded_to
from shared.logging import get_logger
from shared.names import DEADLETTER_STREAM, GATE_GROUP, producer_stream
from shared.redis_acl import GATE_LOCK_KEY

log = get_logger(__name__)

GATE_CONSUMER = "gate"
"""The one consumer name of group `gate`: whoever holds the lock takes over the entries a dead
holder had read but not forwarded."""

_BODY = BODY_FIELD.encode()

FAN_OUT = "for i = 1, #KEYS do redis.call('XADD', KEYS[i], '*', unpack(ARGV)) end"
"""Append the fields in ARGV to every stream in KEYS, in order (server-side: redis-py packs the fields and
parses a reply once instead of once per stream; docs/BENCHMARKS.md, Pipeline, session 13)."""


@dataclass(frozen=True, slots=True)
class ReadEntry:
    stream: str
    entry_id: str
    fields: dict[bytes, bytes]

    @property
    def owner(self) -> str:
        return self.stream.rsplit(":", 1)[1]


def screen_entry(entry: ReadEntry) -> str | None:
    """Why `entry` must not reach `cf:events`, or None to forward it (pure)."""
    body = entry.fields.get(_BODY)
    if body is None:
        return f"entry has no {BODY_FIELD!r} field"
    try:
        event_type = json.loads(body)["type"]
    except (ValueError, KeyError, TypeError) as exc:
        return f"unreadable event body: {type(exc).__name__}"
    if not isinstance(event_type, str):
        return "the event body's type is not a string"
    field_type = entry.fields.get(b"type", b"").decode(errors="replace")
    if field_type != event_type:
        return f"the entry's type field {field_type!r} differs from its body's type {event_type!r}"
    return refusal(entry.owner, event_type)


class Gate:
    """Forwards the producer streams to `cf:events` while it holds the gate lock (module docstring)."""

    def __init__(self, redis: Redis, *, producers: Sequence[str] = PRODUCERS, batch_size: int = 500,
                 block_ms: int = 1000, lock_ttl_ms: int = 10_000,
                 routes: Mapping[bytes, tuple[str, ...]] = ROUTING_TABLE) -> None:  # fmt: skip
        self.redis = redis
        self.streams = [producer_stream(owner) for owner in producers]
        self.routes = routes  # wire type -> routed streams (step 4)
        self.batch_size = batch_size
        self.block_ms = block_ms
        self.lock_ttl_ms = lock_ttl_ms
        self.token = secrets.token_hex(8)
        self.leading = False
        self.renew_due = 0.0  # time.monotonic() after which the lock is asked for again (step 1)
        self.recovering = True  # read this consumer's unacked entries before new ones
        self.forwarded = 0
        self.refused = 0

    async def forward_once(self) -> int:
        """One step (module docstring); how many entries were forwarded or refused."""
        if not await self._hold_lock():
            return 0
        entries = await self._read()
        if not entries:
            return 0
        try:
            await self._commit(entries)
        except WatchError:
            log.warning("gate lock lost before forwarding; another instance continues", entries=len(entries))
            self.leading, self.recovering = False, True
            return 0
        return len(entries)

    async def _hold_lock(self) -> bool:
        if self.leading and time.monotonic() < self.renew_due:
            return True  # set or renewed less than a third of its TTL ago: still ours
        sent = time.monotonic()
        if await self.redis.set(GATE_LOCK_KEY, self.token, nx=True, px=self.lock_ttl_ms):
            await self._became_leader()
        elif await self.redis.get(GATE_LOCK_KEY) == self.token.encode():
            await self.redis.pexpire(GATE_LOCK_KEY, self.lock_ttl_ms)
            if not self.leading:  # a step failed (Redis timeout, restart) while the lock stayed ours
                await self._became_leader()
        else:
            self.leading = False
        self._renewed(sent)
        return self.leading

    async def release(self) -> bool:
        """Give the lock up if this instance holds it (a graceful stop), so the next instance forwards at
        once instead of after the lock's TTL; True if it was ours. Entries read and not committed stay
        pending for the next holder (step 2)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(GATE_LOCK_KEY)
            if await pipe.get(GATE_LOCK_KEY) != self.token.encode():
                await pipe.unwatch()
                return False
            pipe.multi()
            pipe.delete(GATE_LOCK_KEY)
            try:
                await pipe.execute()
            except WatchError:  # taken over (or expired and taken) between the check and the delete
                return False
        self.leading = False
        log.info("gate lock released")
        return True

    def _renewed(self, sent: float) -> None:
        """The lock's TTL was reset by a command sent at `sent` (monotonic): ask again after a third of it."""
        self.renew_due = sent + self.lock_ttl_ms / 3000 if self.leading else 0.0

    async def _became_leader(self) -> None:
        for stream in self.streams:
            await ensure_group(self.redis, stream, GATE_GROUP, "0")
        self.leading, self.recovering = True, True
        log.info("gate forwarding", streams=len(self.streams))

    async def _read(self) -> list[ReadEntry]:
        if self.recovering:
            entries = await self._read_from("0", block_ms=None)
            if entries:
                return entries
            self.recovering = False
        return await self._read_from(">", block_ms=self.block_ms)

    async def _read_from(self, position: str, block_ms: int | None) -> list[ReadEntry]:
        answer = await self.redis.xreadgroup(
            GATE_GROUP, GATE_CONSUMER, dict.fromkeys(self.streams, position), count=self.batch_size, block=block_ms
        )
        return [
            ReadEntry(_text(stream), _text(entry_id), fields)
            for stream, rows in (answer or []) for entry_id, fields in rows if fields is not None
        ]  # fmt: skip

    def _append(self, pipe: Pipeline, entry: ReadEntry) -> None:
        """Queue an accepted entry's appends (step 4): one XADD to `cf:events`, or, for a routed type, one
        EVAL of `FAN_OUT` that appends the same fields to `cf:events` and then to its routed streams."""
        streams = forwarded_to(entry.fields[b"type"], self.routes)
        if len(streams) == 1:
            pipe.xadd(streams[0], entry.fields)
            return
        pipe.eval(FAN_OUT, len(streams), *streams, *chain.from_iterable(entry.fields.items()))

    async def _commit(self, entries: list[ReadEntry]) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(GATE_LOCK_KEY)
            if await pipe.get(GATE_LOCK_KEY) != self.token.encode():
                raise WatchError("the gate lock is held by another instance")
            pipe.multi()
            refused = 0
            for entry in entries:
                reason = screen_entry(entry)
                if reason is None:
                    self._append(pipe, entry)
                    continue
                refused += 1
                source = DeadLetterSource(entry.stream, GATE_GROUP, GATE_CONSUMER, entry.entry_id)
                pipe.xadd(DEADLETTER_STREAM, deadletter_fields(source, entry.fields, DeadReason.INVALID, 1, reason))
                log.error("event refused by the gate", stream=entry.stream, entry_id=entry.entry_id, reason=reason)
            for stream in dict.fromkeys(entry.stream for entry in entries):
                pipe.xack(stream, GATE_GROUP, *[entry.entry_id for entry in entries if entry.stream == stream])
            pipe.pexpire(GATE_LOCK_KEY, self.lock_ttl_ms)
            sent = time.monotonic()
            await pipe.execute()
        self._renewed(sent)
        self.forwarded += len(entries) - refused
        self.refused += refused


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
