"""The system's state as Prometheus gauges, read at scrape time by the console's `GET /metrics`.

Sources (read-only): the console's read models (`views.tasks`, `views.nodes`, `views.leases`), the
utilisation agents last reported (`dispatcher.gpu_utilisation`), the ledger's quota accounts in force
(`services.ledger.quotas.load_quota_status`) and the length of `cf:deadletter`. A source whose schema
does not exist yet (its service never ran) is skipped; the other gauges are still served.

Each scrape first computes every value, then replaces each gauge's series at once, so a label set
that disappeared (a reason no task has any more) does not linger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Gauge, generate_latest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from services.observability import metrics
from shared.events.states import TaskState
from shared.logging import get_logger
from shared.names import DEADLETTER_STREAM
from shared.scheduling.model import PriorityClass

log = get_logger(__name__)

Series = dict[tuple[str, ...], float]
MISSING_SOURCE = (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError)
TERMINAL_STATES = [state.value for state in TaskState if state.is_terminal]
_refreshing = asyncio.Lock()


async def metrics_endpoint(request: Request) -> Response:
    """`GET /metrics` of the console: the state gauges refreshed, then every metric of the process."""
    await refresh_system_state(request.app.state.pool, request.app.state.settings.redis_url)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


async def refresh_system_state(pool: asyncpg.Pool, redis_url: str | None) -> None:
    """Recompute every state gauge (one scrape at a time)."""
    async with _refreshing:
        readers: list[tuple[Gauge, Callable[[asyncpg.Pool], Awaitable[Series]]]] = [
            (metrics.TASKS, load_task_counts),
            (metrics.GPUS, load_gpu_counts),
            (metrics.NODES, load_node_counts),
            (metrics.GPU_UTILISATION, load_gpu_utilisation),
            (metrics.LEASES, load_lease_counts),
            (metrics.QUOTA_REMAINING, load_quota_remaining),
            (metrics.QUOTA_GRANTED, load_quota_granted),
        ]
        for gauge, read in readers:
            try:
                replace_series(gauge, await read(pool))
            except MISSING_SOURCE as exc:  # that service has not created its tables yet
                log.debug("metrics source missing", reader=read.__name__, error=str(exc))
        if redis_url:
            try:
                metrics.DEADLETTERS.set(await load_deadletter_count(redis_url))
            except RedisError as exc:  # the other gauges are still worth serving
                log.warning("dead-letter count unavailable", error=str(exc))


def replace_series(gauge: Gauge, series: Series) -> None:
    gauge.clear()
    for labels, value in series.items():
        gauge.labels(*labels).set(value)


async def load_task_counts(pool: asyncpg.Pool) -> Series:
    rows = await pool.fetch(
        "SELECT state, coalesce(view->>'priority_class', 'unknown') AS priority_class, view->>'reason' AS reason,"
        " count(*) AS n FROM views.tasks WHERE state <> ALL($1::text[]) GROUP BY 1, 2, 3",
        TERMINAL_STATES,
    )
    return {(r["state"], r["priority_class"], r["reason"] or ""): r["n"] for r in rows}


async def load_gpu_counts(pool: asyncpg.Pool) -> Series:
    rows = await pool.fetch(
        "SELECT n.card_type, sum(n.gpus) AS total,"
        " coalesce(sum(a.allocated), 0) AS allocated, coalesce(sum(a.borrowed), 0) AS borrowed"
        " FROM views.nodes n LEFT JOIN ("
        "   SELECT l.node_id, sum(cardinality(l.gpu_indices)) AS allocated,"
        "          sum(cardinality(l.gpu_indices)) FILTER (WHERE t.view->>'priority_class' = $1) AS borrowed"
        "   FROM views.leases l LEFT JOIN views.tasks t ON t.id = l.task_id"
        "   WHERE l.ended_at IS NULL AND l.granted_at IS NOT NULL GROUP BY l.node_id"
        " ) a ON a.node_id = n.node_id"
        " WHERE n.alive GROUP BY n.card_type",
        PriorityClass.OPPORTUNISTIC.value,
    )
    series: Series = {}
    for r in rows:
        series[(r["card_type"], "allocated")] = r["allocated"]
        series[(r["card_type"], "idle")] = max(0, r["total"] - r["allocated"])
        series[(r["card_type"], "borrowed")] = r["borrowed"]
    return series


async def load_node_counts(pool: asyncpg.Pool) -> Series:
    rows = await pool.fetch("SELECT card_type, alive, count(*) AS n FROM views.nodes GROUP BY 1, 2")
    return {(r["card_type"], str(r["alive"]).lower()): r["n"] for r in rows}


async def load_gpu_utilisation(pool: asyncpg.Pool) -> Series:
    rows = await pool.fetch(
        "SELECT n.card_type, u.node_id, u.gpu_index, u.util_pct FROM dispatcher.gpu_utilisation u"
        " JOIN views.nodes n ON n.node_id = u.node_id WHERE n.alive"
    )
    return {(r["card_type"], r["node_id"], str(r["gpu_index"])): r["util_pct"] for r in rows}


async def load_lease_counts(pool: asyncpg.Pool) -> Series:
    rows = await pool.fetch(
        "SELECT CASE WHEN ended_at IS NULL THEN 'active' ELSE coalesce(end_reason, 'ended') END AS state,"
        " count(*) AS n FROM views.leases GROUP BY 1"
    )
    return {(r["state"],): r["n"] for r in rows}


async def load_quota_remaining(pool: asyncpg.Pool) -> Series:
    return {labels: remaining for labels, (_, remaining) in (await _load_quota(pool)).items()}


async def load_quota_granted(pool: asyncpg.Pool) -> Series:
    return {labels: granted for labels, (granted, _) in (await _load_quota(pool)).items()}


async def _load_quota(pool: asyncpg.Pool) -> dict[tuple[str, ...], tuple[float, float]]:
    """(project, account, card type) -> (granted, remaining) GPU-hours of each account in force."""
    from services.ledger.quotas import load_quota_status  # the ledger's own rule for what is used

    accounts = await load_quota_status(pool, active_at=datetime.now(UTC))
    return {
        (a.project, a.account_id, a.card_type or "any"): (float(a.gpu_hours), float(a.remaining_gpu_hours))
        for a in accounts
    }


async def load_deadletter_count(redis_url: str) -> int:
    redis = Redis.from_url(redis_url)
    try:
        return int(await redis.xlen(DEADLETTER_STREAM))
    finally:
        await redis.aclose()
