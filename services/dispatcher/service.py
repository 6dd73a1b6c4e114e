"""The dispatcher service: `SPEC` for `cardflow service dispatcher`, `make_spec(config)` for tests.

Start-up (`setup`): wait for the leader lock — a standby instance stays here, doing nothing, until
the lock frees or it is stopped — then, as leader with a fresh epoch:

- `cf:events` (group `dispatcher`, batches) -> `event_handler.handle_events`
- `cf:reports` (group `dispatcher`, batches) -> `report_handler.handle_reports`
- the dispatch loop (`dispatch_loop.cycle_loop`: debounced cycles + the tick's sweep)
- a watch that stops the process when the leader lock's session is gone or another instance took
  over (`LeadershipLost`); a supervisor restarts it, and it comes back as a standby.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from services.common.runtime import ServiceContext, ServiceSpec, parse_events_of
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.context import Dispatcher
from services.dispatcher.dispatch_loop import cycle_loop
from services.dispatcher.event_handler import handle_events
from services.dispatcher.leader import LeaderLock, LeadershipLost
from services.dispatcher.report_handler import handle_reports
from shared.delivery.arrival import with_arrival
from shared.delivery.consumer import default_consumer_name, reliable_batch_subscriber
from shared.events import parse_report
from shared.leasing.task_facets import RELEVANT
from shared.logging import get_logger
from shared.names import DISPATCHER_GROUP, EVENTS_STREAM, REPORTS_STREAM

log = get_logger(__name__)

MIGRATIONS = Path(__file__).parent / "sql"
T = TypeVar("T")


def make_spec(config: DispatcherConfig | None = None) -> ServiceSpec:
    """The dispatcher's `ServiceSpec`; without `config`, the knobs come from `CARDFLOW_DISPATCHER_*`."""

    async def setup(ctx: ServiceContext) -> None:
        await start_dispatcher(ctx, config or DispatcherConfig())

    return ServiceSpec(name="dispatcher", schema="dispatcher", migrations=MIGRATIONS, setup=setup)


SPEC = make_spec()


async def start_dispatcher(ctx: ServiceContext, config: DispatcherConfig) -> None:
    """Wait to be leader, then register the subscribers and loops (see the module docstring)."""
    lock = LeaderLock(ctx.settings.database_dsn or "", ctx.schema, ctx.producer)
    ctx.resources.push_async_callback(lock.release)  # the session (and the lock) ends with the service
    epoch = await lock.acquire(ctx.stop, config.leader_poll_s)
    if epoch is None:  # stopped while standby
        return
    dc = Dispatcher(ctx.pool, ctx.schema, ctx.producer, ctx.actor, config, epoch, redis=ctx.redis)
    ctx.state["dispatcher"] = dc
    consumer = f"{default_consumer_name()}-{ctx.instance}-e{epoch}"
    options: dict[str, Any] = {
        "group": DISPATCHER_GROUP, "consumer": consumer, "max_records": config.batch_size,
        "min_idle_ms": config.min_idle_ms,
    }

    @reliable_batch_subscriber(
        ctx.broker, stream=EVENTS_STREAM, parse=parse_events_of(*RELEVANT), parse_entry=True, **options
    )
    async def on_events(events: list[Any]) -> None:
        await _stop_if_deposed(ctx, handle_events(dc, events))

    @reliable_batch_subscriber(ctx.broker, stream=REPORTS_STREAM, parse=with_arrival(parse_report), parse_entry=True,
                               linger_ms=config.report_linger_ms, **options)
    async def on_reports(reports: list[Any]) -> None:
        await _stop_if_deposed(ctx, handle_reports(dc, reports))

    async def run_cycles(ctx: ServiceContext) -> None:
        await _stop_if_deposed(ctx, cycle_loop(dc, ctx.stop))

    async def watch_leadership(ctx: ServiceContext) -> None:
        if not await lock.still_held():
            log.error("leader lock lost; stopping so a supervisor restarts this instance as a standby")
            ctx.stop.set()

    dc.request_cycle()
    ctx.every(config.tick_s, run_cycles, name="cycle")
    ctx.every(config.tick_s, watch_leadership, name="leadership")


async def _stop_if_deposed(ctx: ServiceContext, work: Awaitable[T]) -> T:
    """Run `work`; if another instance became leader, stop this one (and re-raise)."""
    try:
        return await work
    except LeadershipLost:
        log.error("another dispatcher instance is leader now; stopping")
        ctx.stop.set()
        raise


__all__ = ["MIGRATIONS", "SPEC", "make_spec", "start_dispatcher"]
