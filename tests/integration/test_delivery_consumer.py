"""Consumer conventions against real Redis: group from `0`, claimer retries, dead-letter after N
deliveries, invalid entries dead-lettered at once, batch consumption."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from faststream.redis import RedisBroker
from redis.asyncio import Redis

from shared.delivery import read_deadletters, reliable_batch_subscriber, reliable_subscriber, replay_deadletter, wire_fields
from shared.delivery.entry_steps import Entry
from shared.delivery.deadletter import DeadLetter
from shared.embedded import Endpoints
from tests.helpers.delivery_support import TestHappened, a_test_event, parse_test_event, redis, unique, wait_until  # noqa: F401

FAST = {"min_idle_ms": 150, "claim_interval_ms": 30}


@pytest.fixture
async def broker(backends: Endpoints) -> AsyncIterator[RedisBroker]:
    created = RedisBroker(backends.redis_url, log_level=logging.WARNING)
    yield created
    await created.stop()


@pytest.fixture
def names() -> dict[str, str]:
    return {"stream": unique("cf:test:in"), "group": "g", "deadletter": unique("cf:test:dead")}


async def deadletters(redis: Redis, stream: str) -> list[DeadLetter]:
    return await read_deadletters(redis, deadletter_stream=stream)


async def test_a_new_group_starts_at_0_so_events_published_before_start_are_consumed(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    early = a_test_event(1)
    await redis.xadd(names["stream"], wire_fields(early))
    seen: list[str] = []

    @reliable_subscriber(broker, stream=names["stream"], group=names["group"], parse=parse_test_event, **FAST)
    async def handle(event: TestHappened) -> None:
        seen.append(event.event_id)

    await broker.start()

    async def consumed() -> bool:
        return seen == [early.event_id]

    assert await wait_until(consumed)
    assert (await redis.xpending(names["stream"], names["group"]))["pending"] == 0


async def test_an_always_failing_entry_is_dead_lettered_after_n_deliveries_and_later_ones_flow(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    poison, *good = [a_test_event(0, poison=True), a_test_event(1), a_test_event(2), a_test_event(3)]
    attempts: Counter[str] = Counter()

    @reliable_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_test_event,
        max_deliveries=5, deadletter_stream=names["deadletter"], **FAST,
    )  # fmt: skip
    async def handle(event: TestHappened) -> None:
        attempts[event.event_id] += 1
        if event.data.get("poison"):
            raise ValueError("cannot apply poison")

    await broker.start()
    for event in (poison, *good):
        await redis.xadd(names["stream"], wire_fields(event))

    async def settled() -> bool:
        return len(await deadletters(redis, names["deadletter"])) == 1

    assert await wait_until(settled)
    [dead] = await deadletters(redis, names["deadletter"])
    assert (dead.reason, dead.deliveries, dead.error) == ("failed", 5, "ValueError: cannot apply poison")
    assert (dead.stream, dead.group) == (names["stream"], names["group"])
    assert dead.original == {k.encode(): v.encode() for k, v in wire_fields(poison).items()}
    assert attempts[poison.event_id] == 5
    assert all(attempts[e.event_id] == 1 for e in good)
    assert (await redis.xpending(names["stream"], names["group"]))["pending"] == 0


async def test_an_invalid_entry_is_dead_lettered_at_once_without_calling_the_handler(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    handled: list[int] = []

    @reliable_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_test_event,
        deadletter_stream=names["deadletter"], **FAST,
    )  # fmt: skip
    async def handle(event: TestHappened) -> None:
        handled.append(event.data["n"])

    await broker.start()
    await redis.xadd(names["stream"], {"event": "{not json"})
    await redis.xadd(names["stream"], {"type": "test.happened"})  # no body at all
    await redis.xadd(names["stream"], wire_fields(a_test_event(7)))

    async def settled() -> bool:
        return handled == [7] and len(await deadletters(redis, names["deadletter"])) == 2

    assert await wait_until(settled)
    dead = await deadletters(redis, names["deadletter"])
    assert [(d.reason, d.deliveries) for d in dead] == [("invalid", 1), ("invalid", 1)]
    assert "json" in dead[0].error.lower() and "MissingBodyError" in dead[1].error


async def test_a_replayed_dead_letter_is_consumed_again(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    healed = False
    applied: list[int] = []

    @reliable_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_test_event,
        max_deliveries=2, deadletter_stream=names["deadletter"], **FAST,
    )  # fmt: skip
    async def handle(event: TestHappened) -> None:
        if not healed:
            raise RuntimeError("dependency down")
        applied.append(event.data["n"])

    await broker.start()
    await redis.xadd(names["stream"], wire_fields(a_test_event(5)))

    async def dead_lettered() -> bool:
        return len(await deadletters(redis, names["deadletter"])) == 1

    assert await wait_until(dead_lettered)
    healed = True
    [dead] = await deadletters(redis, names["deadletter"])
    await replay_deadletter(redis, dead.deadletter_id, deadletter_stream=names["deadletter"])

    async def reapplied() -> bool:
        return applied == [5]

    assert await wait_until(reapplied)
    assert await deadletters(redis, names["deadletter"]) == []


async def test_batch_subscriber_applies_batches_and_isolates_a_failing_entry(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    events = [a_test_event(n, poison=(n == 13)) for n in range(40)]
    for event in events:
        await redis.xadd(names["stream"], wire_fields(event))
    applied: Counter[int] = Counter()
    batch_sizes: list[int] = []

    @reliable_batch_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_test_event,
        max_deliveries=3, max_records=25, deadletter_stream=names["deadletter"], **FAST,
    )  # fmt: skip
    async def handle(batch: list[TestHappened]) -> None:
        batch_sizes.append(len(batch))
        if any(e.data.get("poison") for e in batch):
            raise RuntimeError("poison in batch")
        applied.update(e.data["n"] for e in batch)

    await broker.start()

    async def settled() -> bool:
        return len(applied) == 39 and len(await deadletters(redis, names["deadletter"])) == 1

    assert await wait_until(settled)
    [dead] = await deadletters(redis, names["deadletter"])
    assert (dead.reason, dead.deliveries, dead.original[b"event_id"]) == ("failed", 3, events[13].event_id.encode())
    assert 13 not in applied
    assert max(batch_sizes) > 1
    assert (await redis.xpending(names["stream"], names["group"]))["pending"] == 0


async def test_a_lingering_batch_reader_gathers_what_arrives_meanwhile_into_one_batch(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    batches: list[list[int]] = []

    @reliable_batch_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_test_event, max_records=25,
        linger_ms=3_000, **FAST,
    )  # fmt: skip
    async def handle(batch: list[TestHappened]) -> None:
        batches.append([e.data["n"] for e in batch])

    await broker.start()
    await redis.xadd(names["stream"], wire_fields(a_test_event(0)))

    async def first_handled() -> bool:
        return batches == [[0]]

    assert await wait_until(first_handled)
    for n in (1, 2, 3):  # one at a time while the reader lingers: without it each would be a batch of its own
        await redis.xadd(names["stream"], wire_fields(a_test_event(n)))
        await asyncio.sleep(0.05)

    async def all_handled() -> bool:
        return sum(len(batch) for batch in batches) == 4

    assert await wait_until(all_handled)
    assert batches == [[0], [1, 2, 3]]
    assert (await redis.xpending(names["stream"], names["group"]))["pending"] == 0


def test_a_negative_linger_is_refused(broker: RedisBroker, names: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="linger_ms"):
        reliable_batch_subscriber(broker, stream=names["stream"], group=names["group"], parse=parse_test_event,
                                  linger_ms=-1)


async def test_an_entry_whose_consumers_kept_dying_is_dead_lettered_without_running_the_handler(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    stream, group = names["stream"], names["group"]
    await redis.xgroup_create(stream, group, id="0", mkstream=True)
    entry_id = await redis.xadd(stream, wire_fields(a_test_event(1)))
    await redis.xreadgroup(group, "died-1", {stream: ">"})  # delivery 1, never acked
    for dead_consumer in ("died-2", "died-3"):  # each claim is one more delivery
        await redis.xclaim(stream, group, dead_consumer, min_idle_time=0, message_ids=[entry_id])
    handled: list[int] = []

    @reliable_subscriber(
        broker, stream=stream, group=group, parse=parse_test_event,
        max_deliveries=3, deadletter_stream=names["deadletter"], **FAST,
    )  # fmt: skip
    async def handle(event: TestHappened) -> None:
        handled.append(event.data["n"])

    await broker.start()

    async def dead_lettered() -> bool:
        return len(await deadletters(redis, names["deadletter"])) == 1

    assert await wait_until(dead_lettered)
    [dead] = await deadletters(redis, names["deadletter"])
    assert (dead.reason, dead.deliveries, dead.error, dead.entry_id) == ("exhausted", 4, "", entry_id.decode())
    assert handled == []


async def test_parse_entry_hands_the_whole_entry_to_the_parser(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    def parse_plain_entry(entry: Entry) -> dict[str, str]:
        if b"task" not in entry.fields:
            raise ValueError("no task field")
        return {k.decode(): v.decode() for k, v in entry.fields.items()} | {"entry_id": entry.entry_id}

    parsed: list[dict[str, str]] = []

    @reliable_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_plain_entry, parse_entry=True,
        deadletter_stream=names["deadletter"], **FAST,
    )  # fmt: skip
    async def handle(item: dict[str, str]) -> None:
        parsed.append(item)

    await broker.start()
    await redis.xadd(names["stream"], {"other": "x"})
    entry_id = (await redis.xadd(names["stream"], {"task": "T1", "gpus": "2"})).decode()

    async def settled() -> bool:
        return len(parsed) == 1 and len(await deadletters(redis, names["deadletter"])) == 1

    assert await wait_until(settled)
    assert parsed == [{"task": "T1", "gpus": "2", "entry_id": entry_id}]
    assert (await deadletters(redis, names["deadletter"]))[0].error == "ValueError: no task field"


async def test_a_subscriber_whose_start_stalls_past_faststreams_3_s_still_starts_and_consumes(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    """FastStream's start gives up after 3 s waiting for a subscriber's consume loop to ping Redis.
    In-process services share one event loop, and on a busy machine a synchronous stretch of one of
    them (or a starved process) can stall that loop past 3 s: the service then died at start. Here
    the loop stalls 3.3 s right after each consume loop is created, inside FastStream's window."""
    seen: list[str] = []

    @reliable_subscriber(broker, stream=names["stream"], group=names["group"], parse=parse_test_event, **FAST)
    async def handle(event: TestHappened) -> None:
        seen.append(event.event_id)

    loop = asyncio.get_running_loop()
    stalled: list[str] = []

    def stall_after_consume_loops_start(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop)
        if getattr(coro, "__name__", "") == "_consume":
            stalled.append(coro.__qualname__)
            loop.call_soon(time.sleep, 3.3)
        return task

    loop.set_task_factory(stall_after_consume_loops_start)
    try:
        await broker.start()
    finally:
        loop.set_task_factory(None)
    assert stalled, "the stall never happened: FastStream's consume loop is no longer called _consume"
    event = a_test_event(1)
    await redis.xadd(names["stream"], wire_fields(event))

    async def consumed() -> bool:
        return seen == [event.event_id]

    assert await wait_until(consumed)
