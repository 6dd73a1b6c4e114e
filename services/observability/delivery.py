"""A service's own metrics and traces: FastStream's middlewares on its broker, its outbox backlog and
the lag and pending entries of its consumer groups, refreshed every few seconds.

`run_service` calls `instrument_service(ctx)` before the service's `setup`; with
`CARDFLOW_METRICS_PORT` unset and `CARDFLOW_TRACING=off` (the defaults) it adds nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from services.observability.metrics import CONSUMER_LAG, CONSUMER_PENDING, OUTBOX_BACKLOG, serve_metrics
from services.observability.tracing import telemetry_middleware
from shared.delivery.db import quote_schema

if TYPE_CHECKING:
    from faststream.redis import RedisBroker

    from services.common.runtime import ServiceContext

REFRESH_S = 10.0
LAG_COUNT_CAP = 10_000
"""On Redis < 7 (no `lag` in XINFO GROUPS) the lag is counted with XRANGE, up to this many entries."""


async def instrument_service(ctx: ServiceContext) -> None:
    """Add the metrics and tracing middlewares, serve /metrics and refresh the delivery gauges."""
    settings = ctx.settings
    tracing = telemetry_middleware(settings, ctx.spec.name)
    if tracing is not None:
        middleware, provider = tracing
        ctx.broker.add_middleware(middleware)
        ctx.resources.callback(provider.shutdown)  # flushes the last spans when the service stops
    if settings.metrics_port is None:
        return
    from faststream.redis.prometheus import RedisPrometheusMiddleware
    from prometheus_client import REGISTRY

    ctx.broker.add_middleware(RedisPrometheusMiddleware(registry=REGISTRY, app_name=ctx.spec.name))
    serve_metrics(settings.metrics_port)
    ctx.every(REFRESH_S, refresh_delivery_metrics, name="metrics")


async def refresh_delivery_metrics(ctx: ServiceContext) -> None:
    """Outbox backlog of the service's schema; lag and pending of each group its broker reads."""
    if ctx.spec.schema is not None:
        backlog = await ctx.pool.fetchval(
            f"SELECT count(*) FROM {quote_schema(ctx.spec.schema)}.outbox WHERE published_at IS NULL"
        )
        OUTBOX_BACKLOG.labels(ctx.spec.name).set(backlog)
    for stream, group in consumer_groups(ctx.broker):
        lag, pending = await group_backlog(ctx.redis, stream, group)
        if lag is not None:
            CONSUMER_LAG.labels(stream, group).set(lag)
            CONSUMER_PENDING.labels(stream, group).set(pending)


def consumer_groups(broker: RedisBroker) -> set[tuple[str, str]]:
    """(stream, group) of every consumer-group subscriber registered on `broker`."""
    subs = (getattr(subscriber, "stream_sub", None) for subscriber in broker.subscribers)
    return {(sub.name, sub.group) for sub in subs if sub is not None and sub.group}


async def group_backlog(redis: Redis, stream: str, group: str) -> tuple[int | None, int]:
    """(lag, pending) of `group` on `stream`; lag None while the stream or group does not exist."""
    try:
        groups: list[dict[str, Any]] = await redis.xinfo_groups(stream)
    except ResponseError:  # no such stream yet
        return None, 0
    info = next((g for g in groups if _text(g["name"]) == group), None)
    if info is None:
        return None, 0
    lag = info.get("lag")
    if lag is None:  # Redis < 7, or Redis cannot tell (entries were deleted): count what is left
        last = _text(info["last-delivered-id"])
        lag = len(await redis.xrange(stream, min=f"({last}", max="+", count=LAG_COUNT_CAP))
    return int(lag), int(info["pending"])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
