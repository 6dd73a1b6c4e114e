"""The ledger service process: `cardflow service ledger` runs `SPEC`.

One batch subscriber on `cf:events` (group `ledger`); each batch is one transaction:

1. record the relevant events as consumed (duplicates drop out), all but those safe to fold again
   (`batch.is_repeatable`: most of them, which need no inbox row);
2. load (and lock) the batch's lease accounts, its tasks' projects, the counted (and held-back)
   output of the runs it reports on or clears, and its nodes' open alive spans;
3. fold the events in order (`services.ledger.batch.fold_batch`, pure);
4. write tasks, leases, usage and output increments, the runs' output and the nodes' spans, and the
   `usage.recorded` events (outbox).

A periodic loop (`services.ledger.quotas.check_quotas`) raises quota alerts. A third subscriber
(group `alerts`) turns alerting events into alerts for the policy's sinks, a loop delivers the
webhooks, and another sends the daily digest when it is due (`services.ledger.alerting`).

The ledger also keeps the audit archive (schema `audit`, `services.audit`): a second batch
subscriber (group `audit`) appends every `cf:events` entry to the hash-chained `audit.events`,
and a periodic loop rolls segments of it to the archive bucket. Another closes a round when its
period ends (`services.ledger.rounds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.audit.archive import prepare_archive, subscribe_archive
from services.audit.segments import SegmentPolicy, roll_due_segments
from services.ledger.rounds import close_due_round
from services.config.holder import DocumentHolder
from services.common.event_batches import not_yet_handled, once_per_id, subscribe_event_batches
from shared.delivery.consumer import OFF_PATH_LINGER_MS
from services.common.runtime import Loop, ServiceContext, ServiceSpec, SkippedEntry
from services.ledger.alerting import AlertPolicy, deliver_webhooks, handle_alert_events, send_digest_if_due
from services.ledger.batch import (
    RELEVANT_TYPES,
    cleared_tasks_of,
    fold_batch,
    is_repeatable,
    lease_ids_of,
    node_ids_of,
    runs_of,
    task_ids_of,
)
from services.ledger.quotas import check_quotas
from services.ledger.store import SCHEMA, load_leases, load_open_spans, load_output_snapshot, load_projects, save_effects
from shared.alerts import ALERTING_TYPES
from shared.cards import Catalog, load_catalog
from shared.config import POLICY
from shared.config.policy import RoundsSection
from shared.events import Envelope, utcnow
from shared.logging import get_logger
from shared.names import ALERTS_GROUP, ARCHIVE_BUCKET, LEDGER_GROUP, REPORTS_BUCKET
from shared.storage import ObjectStore, open_object_store

MIGRATIONS = Path(__file__).parent / "sql"
BATCH_SIZE = 500
QUOTA_CHECK_INTERVAL_S = 30.0
PERIODIC_CHECK_S = 30.0
WEBHOOK_EVERY_S = 1.0
"""How often the alerter POSTs the webhook deliveries that are due."""
DIGEST_CHECK_S = 60.0
"""How often the alerter asks whether the daily digest is due."""
"""How often the ledger looks for a due round and a due archive segment."""

log = get_logger(__name__)


async def handle_batch(
    ctx: ServiceContext, catalog: Catalog, events: Sequence[Envelope | SkippedEntry]
) -> None:
    """The numbered recipe of the module docstring, for one batch."""
    relevant = once_per_id(events, RELEVANT_TYPES)
    if not relevant:
        return
    async with ctx.transaction() as conn:
        todo = await not_yet_handled(conn, ctx, relevant, repeatable=is_repeatable)
        if not todo:
            return
        leases = await load_leases(conn, lease_ids_of(todo))
        projects = await load_projects(conn, task_ids_of(todo) | {lease.task_id for lease in leases.values()})
        output = await load_output_snapshot(conn, runs_of(todo), cleared_tasks_of(todo))
        open_spans = await load_open_spans(conn, node_ids_of(todo))
        effects = fold_batch(todo, catalog, leases, projects, output, open_spans)
        await save_effects(conn, ctx.emitter, effects)
    log.debug("ledger batch", events=len(todo), usage_records=len(effects.emissions))


class LedgerSettings(BaseSettings):
    """Tuning of the ledger service (`CARDFLOW_LEDGER_*`)."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_LEDGER_", extra="ignore")

    round_period_days: float | None = Field(
        None, gt=0, description="overrides the policy's rounds.period_days (tests); None = the policy in force"
    )
    segment_events: int = Field(10_000, ge=1, description="an archive segment is rolled once this many events wait")
    segment_max_age_s: float = Field(3600.0, gt=0, description="... or once the oldest waiting event is this old")

    @property
    def segments(self) -> SegmentPolicy:
        return SegmentPolicy(self.segment_events, timedelta(seconds=self.segment_max_age_s))


def build_spec(
    catalog: Catalog | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    quota_check_interval_s: float = QUOTA_CHECK_INTERVAL_S,
    tuning: LedgerSettings | None = None,
    periodic_check_s: float = PERIODIC_CHECK_S,
    webhook_every_s: float = WEBHOOK_EVERY_S,
    digest_check_s: float = DIGEST_CHECK_S,
    clock: Callable[[], datetime] = utcnow,
) -> ServiceSpec:
    """The ledger's spec: prices from `catalog` (default: the packaged card catalog); rounds and
    archive segments by `tuning` (default: from the environment), checked every `periodic_check_s`;
    the daily alert digest checked every `digest_check_s` by `clock` (tests move it)."""

    async def setup(ctx: ServiceContext) -> None:
        prices = catalog or load_catalog()
        settings = tuning or LedgerSettings()

        async def on_events(events: list[Envelope | SkippedEntry]) -> None:
            await handle_batch(ctx, prices, events)

        subscribe_event_batches(ctx, group=LEDGER_GROUP, types=RELEVANT_TYPES, batch_size=batch_size, handle=on_events,
                                linger_ms=OFF_PATH_LINGER_MS)
        ctx.every(quota_check_interval_s, check_quotas, name="quota-alerts")
        alert_policy = AlertPolicy()

        async def on_alerting(events: list[Envelope | SkippedEntry]) -> None:
            await handle_alert_events(ctx, alert_policy, events)

        subscribe_event_batches(ctx, group=ALERTS_GROUP, types=ALERTING_TYPES, batch_size=batch_size,
                                handle=on_alerting, linger_ms=OFF_PATH_LINGER_MS)
        ctx.every(webhook_every_s, deliver_webhooks, name="alert-webhooks")

        async def digest(ctx: ServiceContext) -> None:
            await send_digest_if_due(ctx, alert_policy, clock())

        ctx.every(digest_check_s, digest, name="alert-digest")
        await prepare_archive(ctx.pool)
        subscribe_archive(ctx.broker, ctx.pool)
        store = await open_stores(ctx)
        ctx.every(periodic_check_s, _rounds_loop(store, RoundPeriods(settings)), name="rounds")
        if store is not None:
            ctx.every(periodic_check_s, _segments_loop(store, settings.segments), name="archive-segments")

    return ServiceSpec(name="ledger", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)


async def open_stores(ctx: ServiceContext) -> ObjectStore | None:
    """The object store with the archive and reports buckets; None (logged) when none is configured."""
    if not ctx.settings.s3_endpoint:
        log.warning("no object storage configured (CARDFLOW_S3_ENDPOINT): no archive segments, round reports only in PostgreSQL")
        return None
    store = await ctx.resources.enter_async_context(open_object_store(ctx.settings))
    for bucket in (ARCHIVE_BUCKET, REPORTS_BUCKET):
        await store.ensure_bucket(bucket)
    return store


def _segments_loop(store: ObjectStore, policy: SegmentPolicy) -> Loop:
    async def roll(ctx: ServiceContext) -> None:
        await roll_due_segments(ctx.pool, store, policy, utcnow())

    return roll


class RoundPeriods:
    """The round period in force: the policy's `rounds.period_days` (hot-reloaded on `refresh`),
    unless `CARDFLOW_LEDGER_ROUND_PERIOD_DAYS` overrides it."""

    def __init__(self, settings: LedgerSettings) -> None:
        default = timedelta(days=RoundsSection().period_days)
        self._policy = DocumentHolder(POLICY, lambda model, _version: timedelta(days=model.rounds.period_days), default)
        self._override = timedelta(days=settings.round_period_days) if settings.round_period_days else None

    async def refresh(self, pool: asyncpg.Pool) -> None:
        if self._override is None:
            await self._policy.refresh(pool)

    @property
    def value(self) -> timedelta:
        return self._override or self._policy.value


def _rounds_loop(store: ObjectStore | None, periods: RoundPeriods) -> Loop:
    async def close_due(ctx: ServiceContext) -> None:
        await periods.refresh(ctx.pool)
        async with ctx.transaction() as conn:
            closed = await close_due_round(conn, store, ctx.emitter, utcnow(), periods.value)
        if closed is not None:
            log.info("round closed at its period's end", round_id=closed.round_id, ends_at=closed.ends_at.isoformat())

    return close_due


SPEC = build_spec()
