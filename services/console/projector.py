"""The views service (`cardflow service views`): projects `cf:events` into the console's read models.

It reads every event of `cf:events` in its own consumer group (`console`), in batches, and per
batch, in ONE transaction: records the event ids in its inbox (duplicates are skipped), folds
the task events through `shared.projection.evolve` into `views.tasks` + `views.events`, and
keeps the fleet (`views.nodes`, `views.leases`). It emits nothing. Readers: the HTTP API and
the CLI, through `services.console.views`.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from services.common.runtime import ServiceContext, ServiceSpec
from services.console.store import SCHEMA, apply_events
from shared.delivery.consumer import reliable_batch_subscriber
from shared.delivery.inbox import prune_inbox, record_consumed_many
from shared.events import Envelope, parse_event
from shared.names import CONSOLE_GROUP, EVENTS_STREAM

MIGRATIONS = Path(__file__).parent / "sql"
BATCH_SIZE = 500
INBOX_RETENTION = timedelta(days=2)
"""Consumed ids are kept far longer than any redelivery (claimer) window, then forgotten."""


async def setup(ctx: ServiceContext) -> None:
    """Register the batch consumer of `cf:events` and the hourly inbox clean-up."""

    @reliable_batch_subscriber(
        ctx.broker, stream=EVENTS_STREAM, group=CONSOLE_GROUP, parse=parse_event, max_records=BATCH_SIZE
    )
    async def project(events: list[Envelope]) -> None:
        async with ctx.transaction() as conn:
            fresh = await record_consumed_many(conn, ctx.schema, CONSOLE_GROUP, [e.event_id for e in events])
            await apply_events(conn, [e for e in events if e.event_id in fresh])

    async def forget_old_inbox(ctx: ServiceContext) -> None:
        await prune_inbox(ctx.pool, ctx.schema, INBOX_RETENTION)

    ctx.every(3600, forget_old_inbox)


SPEC = ServiceSpec(name="views", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)
