"""The consumer groups docs/asyncapi.yaml documents are exactly those the services' FastStream brokers
subscribe: each service's real `setup` runs against real backends (its broker is never started)."""

from __future__ import annotations

import asyncio
import contextlib

from faststream.redis import RedisBroker
from redis.asyncio import Redis

from services.asyncapi import CONSUMER_GROUPS
from services.cli.service import SERVICES, load_spec
from services.common.runtime import ServiceContext, prepare_schema
from services.observability.delivery import consumer_groups
from shared.delivery.db import create_pool
from shared.settings import Settings


async def subscribed_groups(settings: Settings) -> set[tuple[str, str]]:
    """(stream, group) of every subscriber each service registers in its `setup`."""
    found: set[tuple[str, str]] = set()
    pool = await create_pool(settings.database_dsn or "", min_size=1, max_size=4)
    redis = Redis.from_url(settings.redis_url or "")
    try:
        for name in SERVICES:
            spec = load_spec(name)
            await prepare_schema(pool, spec)
            broker = RedisBroker(settings.redis_url, logger=None)
            ctx = ServiceContext(spec, settings, pool, redis, broker, asyncio.Event())
            async with ctx.resources:
                await spec.setup(ctx)
                found |= consumer_groups(broker)
    finally:
        with contextlib.suppress(Exception):
            await redis.aclose()
        await pool.close()
    return found


async def test_every_service_subscribes_exactly_the_documented_groups(fresh_settings: Settings) -> None:
    documented = {(group.stream, group.group) for group in CONSUMER_GROUPS if "{" not in group.stream}

    assert await subscribed_groups(fresh_settings) == documented
