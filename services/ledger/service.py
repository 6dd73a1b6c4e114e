"""The ledger service process: `cardflow service ledger` runs `SPEC`.

One batch subscriber on `cf:events` (group `ledger`); each batch is one transaction:

1. record the relevant events as consumed (duplicates drop out);
2. load (and lock) the batch's lease accounts and its tasks' projects;
3. fold the events in order (`services.ledger.batch.fold_batch`, pure);
4. write tasks, leases, usage increments and outputs, and the `usage.recorded` events (outbox).

A periodic loop (`services.ledger.quotas.check_quotas`) raises quota alerts.

The ledger also keeps the audit archive (schema `audit`, `services.audit`): a second batch
subscriber (group `audit`) appends every `cf:events` entry to the hash-chained `audit.events`,
and a periodic loop rolls segments of it to the archive bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.audit.archive import prepare_archive, subscribe_archive
from services.audit.segments import SegmentPolicy, roll_due_segments
from services.common.event_batches import not_yet_handled, once_per_id, subscribe_event_batches
from services.common.runtime import ServiceContext, ServiceSpec, SkippedEntry
from services.ledger.batch import RELEVANT_TYPES, fold_batch, lease_ids_of, task_ids_of
from services.ledger.quotas import check_quotas
from services.ledger.store import SCHEMA, load_leases, load_projects, save_effects
from shared.cards import Catalog, load_catalog
from shared.events import Envelope, utcnow
from shared.logging import get_logger
from shared.names import ARCHIVE_BUCKET, LEDGER_GROUP
from shared.storage import open_object_store

MIGRATIONS = Path(__file__).parent / "sql"
BATCH_SIZE = 500
QUOTA_CHECK_INTERVAL_S = 30.0
SEGMENT_CHECK_INTERVAL_S = 30.0

log = get_logger(__name__)


async def handle_batch(
    ctx: ServiceContext, catalog: Catalog, events: Sequence[Envelope | SkippedEntry]
) -> None:
    """The numbered recipe of the module docstring, for one batch."""
    relevant = once_per_id(events, RELEVANT_TYPES)
    if not relevant:
        return
    async with ctx.transaction() as conn:
        todo = await not_yet_handled(conn, ctx, relevant)
        if not todo:
            return
        leases = await load_leases(conn, lease_ids_of(todo))
        projects = await load_projects(conn, task_ids_of(todo) | {lease.task_id for lease in leases.values()})
        effects = fold_batch(todo, catalog, leases, projects)
        await save_effects(conn, ctx.emitter, effects)
    log.debug("ledger batch", events=len(todo), usage_records=len(effects.emissions))


def build_spec(
    catalog: Catalog | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    quota_check_interval_s: float = QUOTA_CHECK_INTERVAL_S,
    segments: SegmentPolicy = SegmentPolicy(),
    segment_check_interval_s: float = SEGMENT_CHECK_INTERVAL_S,
) -> ServiceSpec:
    """The ledger's spec: prices from `catalog` (default: the packaged card catalog); archive
    segments rolled by `segments`, checked every `segment_check_interval_s`."""

    async def setup(ctx: ServiceContext) -> None:
        prices = catalog or load_catalog()

        async def on_events(events: list[Envelope | SkippedEntry]) -> None:
            await handle_batch(ctx, prices, events)

        subscribe_event_batches(ctx, group=LEDGER_GROUP, types=RELEVANT_TYPES, batch_size=batch_size, handle=on_events)
        ctx.every(quota_check_interval_s, check_quotas, name="quota-alerts")
        await setup_archive(ctx, segments, segment_check_interval_s)

    return ServiceSpec(name="ledger", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)


async def setup_archive(ctx: ServiceContext, policy: SegmentPolicy, check_interval_s: float) -> None:
    """The archiver (every cf:events entry into audit.events) and the segment roller."""
    await prepare_archive(ctx.pool)
    subscribe_archive(ctx.broker, ctx.pool)
    if not ctx.settings.s3_endpoint:
        log.warning("no object storage configured (CARDFLOW_S3_ENDPOINT): archive segments are not rolled")
        return
    store = await ctx.resources.enter_async_context(open_object_store(ctx.settings))
    await store.ensure_bucket(ARCHIVE_BUCKET)

    async def roll(ctx: ServiceContext) -> None:
        await roll_due_segments(ctx.pool, store, policy, utcnow())

    ctx.every(check_interval_s, roll, name="archive-segments")


SPEC = build_spec()
