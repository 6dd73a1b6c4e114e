"""The consumer groups docs/asyncapi.yaml documents are exactly those the running services create."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from services.asyncapi import CONSUMER_GROUPS
from services.cli.service import load_spec, SERVICES
from shared.settings import Settings
from tests.helpers.running_services import RunningServices, poll_until

STREAMS_OF_SERVICES = {group.stream for group in CONSUMER_GROUPS if "{" not in group.stream}
"""Every documented stream a service (not an agent) reads."""


async def groups_on(redis: Redis, streams: set[str]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for stream in streams:
        try:
            found |= {(stream, info["name"].decode()) for info in await redis.xinfo_groups(stream)}
        except ResponseError:  # the stream does not exist yet
            continue
    return found


async def test_every_service_creates_exactly_the_documented_groups(fresh_settings: Settings) -> None:
    documented = {(group.stream, group.group) for group in CONSUMER_GROUPS if group.stream in STREAMS_OF_SERVICES}
    specs = [load_spec(name) for name in SERVICES]

    async with RunningServices(fresh_settings, *specs) as running:

        async def all_created() -> bool:
            return await groups_on(running.redis, STREAMS_OF_SERVICES) >= documented

        await poll_until(all_created, timeout=60)
        assert await groups_on(running.redis, STREAMS_OF_SERVICES) == documented
