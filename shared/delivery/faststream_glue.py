"""How a cardflow subscriber meets FastStream: a start that outlasts a slow or silent Redis, raw messages.

- `survive_a_slow_start` / `until_redis_answers`: a subscriber's start (creating its consumer group,
  FastStream's own start) is tried again while Redis does not answer, and outlasts FastStream's
  hard-coded 3 s first-PING limit instead of ending its service;
- `subscriber_options`: every reader and claimer acks by hand and gets the raw message undecoded
  (`parse_undecoded`, `decode_to_raw`), so any entry, whatever its bytes, reaches the delivery steps
  of `shared.delivery.consumer`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from faststream import AckPolicy
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.logging import get_logger

log = get_logger(__name__)

FASTSTREAM_START_LIMIT_S = 3.0
"""How long FastStream's `start` waits for a subscriber's consume loop to answer its first PING."""


def survive_a_slow_start(subscriber: Any, title: str) -> None:
    """Make `subscriber.start` outlast FastStream's 3 s limit instead of killing its service.

    FastStream's `start` creates the subscriber's consume loop, then waits at most 3 s (hard-coded)
    for that loop's first PING to Redis and raises `TimeoutError` when it overruns. Nothing is wrong
    with the subscriber then: its loop runs on and reads once the event loop turns again. But in-process
    services share one event loop, and on a busy machine a synchronous stretch of one of them, or a
    process starved of CPU, can stall it past 3 s: the service died at start. Here the overrun is logged
    and the start goes on; a consume loop that truly cannot reach Redis logs and retries as it does
    after any later outage. A start whose own Redis calls (FastStream creates the group first) find
    Redis unreachable or silent past redis-py's socket timeout is tried again (`until_redis_answers`).
    """
    faststream_start = subscriber.start

    async def start_despite_a_stall() -> None:
        began = time.monotonic()
        try:
            await until_redis_answers(faststream_start, "start the consume loop", title)
        except TimeoutError:
            waited = round(time.monotonic() - began, 2)
            log.warning("subscriber's first ping overran FastStream's start limit; it starts anyway",
                        subscriber=title, limit_s=FASTSTREAM_START_LIMIT_S, waited_s=waited)  # fmt: skip

    subscriber.start = start_despite_a_stall


REDIS_RETRY_MAX_S = 5.0
"""The longest wait between two attempts of a subscriber's start while Redis does not answer."""

REDIS_UNREACHABLE = (RedisConnectionError, RedisTimeoutError)
"""What a redis-py call raises when Redis cannot be reached or does not answer within the socket
timeout (5 s by default): a Redis stalled on a busy machine, restarting, or not up yet. (Not the
builtin `TimeoutError` of FastStream's start limit: that start went through, see
`survive_a_slow_start`.)"""


async def until_redis_answers(attempt: Callable[[], Awaitable[None]], what: str, subscriber: str) -> None:
    """Run `attempt` (a step of a subscriber's start), again after a growing pause for as long as Redis
    does not answer. Without this, a service started while its Redis stalled died at start
    (`tests/reliability/test_redis_stall_at_start.py`)."""
    delay = 0.1
    while True:
        try:
            await attempt()
            return
        except REDIS_UNREACHABLE as error:
            log.warning("Redis does not answer; trying again shortly", step=what, subscriber=subscriber,
                        retry_in_s=delay, error=repr(error))  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, REDIS_RETRY_MAX_S)


def subscriber_options(title: str) -> dict[str, Any]:
    """FastStream subscriber keywords of every reader and claimer: manual acks, the raw message."""
    return {"ack_policy": AckPolicy.MANUAL, "title": title, "parser": parse_undecoded, "decoder": decode_to_raw}


async def decode_to_raw(message: Any, original_decoder: Callable[[Any], Awaitable[Any]]) -> Any:
    """The handler's one argument is the raw message (`parse_undecoded` keeps it), not a decoded body.

    The handlers used to take it as `Context("message")`: fast_depends resolves such a parameter
    with a synchronous call it runs in anyio's worker thread, so every message (and every batch)
    cost two thread hand-overs — CPU, and on a busy machine milliseconds of waiting for the
    thread and for the loop's wake-up.
    """
    return message.raw_message


async def parse_undecoded(message: Any, original_parser: Callable[[Any], Awaitable[Any]]) -> Any:
    """FastStream's message with the fields left undecoded (`consumer.entries_of` reads them raw).

    FastStream's own parser turns every field into JSON text before a handler runs: an entry
    holding bytes that are not UTF-8 made it raise before our steps, so such an entry was never
    acked nor dead-lettered, only claimed again and again. Here it parses an empty stand-in and
    keeps the raw entry, so every entry reaches `DeliveryPipeline.parse_or_dead` (`shared.delivery.entry_steps`)
    whatever its bytes. A batch's stand-in is an empty list: FastStream's batch parser tries (and fails) to decode every item,
    about 4 us an entry for nothing.
    """
    data = message["data"]
    stand_in: dict[bytes, bytes] | list[Any] = {} if isinstance(data, dict) else []
    parsed = await original_parser({**message, "data": stand_in})
    parsed.raw_message = message
    return parsed
