"""The views service (`cardflow service views`): projects `cf:events` into the console's read models.

It reads every event of `cf:events` in its own consumer group (`console`), in batches (types it
does not project, e.g. `lease.renewed`, are acked unparsed), and per batch, in ONE transaction:
records the ids of node events in its inbox (duplicates are skipped), folds the task events
through `shared.projection.evolve` into `views.tasks` + `views.events`, and keeps the fleet
(`views.nodes`, `views.leases`). It emits nothing. Readers: the HTTP API and the CLI, through
`services.console.views`.

Task and lease events need no inbox row: `evolve` itself ignores an event whose owner and subject
it has already seen at that sequence number or later, the history insert skips a known event id,
and the lease rows are written by idempotent upserts (the first end wins). Only node events
(`NODE_TYPES`), whose upserts are not idempotent (a repeated `node.registered` after `node.lost`
would revive the node), are recorded — an inbox row per task event was about an eighth of
PostgreSQL's inserts per task, and one per lease end (`lease.released`, `lease.expired`,
`lease.revoked`) one more row per task.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from services.common.runtime import ServiceContext, ServiceSpec
from services.console.store import FLEET_TYPES, NODE_TYPES, SCHEMA, ViewCache, apply_events
from shared.delivery.consumer import reliable_batch_subscriber
from shared.delivery.entry_steps import Entry
from shared.delivery.inbox import prune_inbox, record_consumed_many
from shared.delivery.wire import extract_body
from shared.events import Envelope, parse_event
from shared.events.carried import USAGE_CARRIER
from shared.names import CONSOLE_GROUP, EVENTS_STREAM
from shared.projection import TASK_EVENT_TYPES

MIGRATIONS = Path(__file__).parent / "sql"
BATCH_SIZE = 500
INBOX_RETENTION = timedelta(days=2)
"""Consumed ids are kept far longer than any redelivery (claimer) window, then forgotten."""

PROJECTED_TYPES = TASK_EVENT_TYPES | FLEET_TYPES | {USAGE_CARRIER}


@dataclass(frozen=True, slots=True)
class Ignored:
    """An entry whose type the views do not project (heartbeats, quotas, ...): not parsed further."""

    type: str


def parse_projected(entry: Entry) -> Envelope | Ignored:
    """The event, parsed only when the views project its type (read from the entry's `type` field)."""
    event_type = entry.fields.get(b"type")
    if event_type is not None and event_type.decode() not in PROJECTED_TYPES:
        return Ignored(event_type.decode())
    return parse_event(extract_body(entry.fields))


async def setup(ctx: ServiceContext) -> None:
    """Register the batch consumer of `cf:events` and the hourly inbox clean-up."""
    cache = ViewCache()

    @reliable_batch_subscriber(
        ctx.broker, stream=EVENTS_STREAM, group=CONSOLE_GROUP, parse=parse_projected, parse_entry=True,
        max_records=BATCH_SIZE,
    )
    async def project(batch: list[Envelope | Ignored]) -> None:
        events = [e for e in batch if not isinstance(e, Ignored)]
        if not events:
            return
        nodes = [e.event_id for e in events if e.type in NODE_TYPES]
        async with ctx.transaction() as conn:
            fresh = await record_consumed_many(conn, ctx.schema, CONSOLE_GROUP, nodes) if nodes else set()
            await apply_events(conn, [e for e in events if e.type not in NODE_TYPES or e.event_id in fresh], cache)

    async def forget_old_inbox(ctx: ServiceContext) -> None:
        await prune_inbox(ctx.pool, ctx.schema, INBOX_RETENTION)

    ctx.every(3600, forget_old_inbox)


SPEC = ServiceSpec(name="views", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)
