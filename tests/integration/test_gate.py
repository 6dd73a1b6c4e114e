"""The gate (services.gate.forwarder) on a real Redis: one leader forwards each producer stream to
`cf:events` in order, and a leader whose step failed (a Redis timeout under load) goes on
forwarding once Redis answers again — it kept the lock, so nobody else would; a stopped leader
gives the lock up, so the next instance need not wait for its TTL."""

from __future__ import annotations

from redis.asyncio import Redis

from services.gate.forwarder import Gate
from shared.delivery.wire import wire_fields
from shared.names import EVENTS_STREAM, producer_stream
from shared.redis_acl import GATE_LOCK_KEY
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory


async def forwarded_ids(redis: Redis) -> list[str]:
    return [fields[b"event_id"].decode() for _, fields in await redis.xrange(EVENTS_STREAM)]


async def test_only_the_lock_holder_forwards_and_each_producers_order_is_kept(redis: Redis) -> None:
    story = TaskStory("T-gate-order")
    events = [story.queued(), story.granted(), story.started()]
    for event in events:
        await redis.xadd(producer_stream("dispatcher"), wire_fields(event))
    leader, other = Gate(redis, block_ms=10), Gate(redis, block_ms=10)
    assert await leader.forward_once() == 3
    last = story.succeeded()
    await redis.xadd(producer_stream("dispatcher"), wire_fields(last))
    assert await other.forward_once() == 0 and not other.leading  # the lock is the leader's
    assert await leader.forward_once() == 1
    assert await forwarded_ids(redis) == [e.event_id for e in [*events, last]]


async def test_a_leader_whose_step_failed_goes_on_forwarding(redis: Redis) -> None:
    story = TaskStory("T-gate-resume")
    gate = Gate(redis, block_ms=10)
    queued, granted = story.queued(), story.granted()
    await redis.xadd(producer_stream("dispatcher"), wire_fields(queued))
    assert await gate.forward_once() == 1
    gate.leading, gate.recovering = False, True  # what the service loop does when a step raises
    await redis.xadd(producer_stream("dispatcher"), wire_fields(granted))
    assert await gate.forward_once() == 1
    assert await forwarded_ids(redis) == [queued.event_id, granted.event_id]


async def test_a_leader_that_lost_its_lock_between_renewals_forwards_nothing_and_loses_nothing(redis: Redis) -> None:
    story = TaskStory("T-gate-taken")
    gate = Gate(redis, block_ms=10)
    first, second = story.queued(), story.granted()
    await redis.xadd(producer_stream("dispatcher"), wire_fields(first))
    assert await gate.forward_once() == 1  # leader; its commit renewed the lock
    await redis.set(GATE_LOCK_KEY, "another-instance")  # taken over before the TTL ran out (e.g. deleted by hand)
    await redis.xadd(producer_stream("dispatcher"), wire_fields(second))
    # renewed a moment ago, the leader does not ask for the lock again: it reads, but its commit is refused
    assert await gate.forward_once() == 0 and not gate.leading
    assert await forwarded_ids(redis) == [first.event_id]
    await redis.delete(GATE_LOCK_KEY)
    assert await Gate(redis, block_ms=10).forward_once() == 1  # the next holder forwards what was read
    assert await forwarded_ids(redis) == [first.event_id, second.event_id]


async def test_a_stopped_leader_gives_the_lock_up_and_the_next_instance_forwards_at_once(redis: Redis) -> None:
    story = TaskStory("T-gate-handover")
    first, second = story.queued(), story.granted()
    leader, bystander = Gate(redis, block_ms=10), Gate(redis, block_ms=10)
    await redis.xadd(producer_stream("dispatcher"), wire_fields(first))
    assert await leader.forward_once() == 1
    assert not await bystander.release()  # not its lock: left alone
    assert await redis.get(GATE_LOCK_KEY) == leader.token.encode()
    assert await leader.release() and not leader.leading
    assert await redis.get(GATE_LOCK_KEY) is None
    await redis.xadd(producer_stream("dispatcher"), wire_fields(second))
    assert await bystander.forward_once() == 1  # at once, not after the 10 s TTL
    assert await forwarded_ids(redis) == [first.event_id, second.event_id]


async def test_the_gate_service_releases_its_lock_when_it_stops(fresh_settings: Settings, redis: Redis) -> None:
    async with RunningServices(fresh_settings) as running:
        assert await running.wait_until(lambda: redis.exists(GATE_LOCK_KEY))
    assert not await redis.exists(GATE_LOCK_KEY)
