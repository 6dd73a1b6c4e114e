"""The matcher service process: `cardflow service matcher` runs `SPEC`.

One batch subscriber on `cf:events` (group `matcher`); each batch is one transaction:

1. record the decision events as consumed (duplicates drop out; closing events are idempotent
   status updates and skip the inbox);
2. take the fleet lock (exclusive if the batch registers or loses nodes or brings a new card
   catalog), load the card catalog in force (`config.changed` hot reload: a newer `cards`
   version is picked up here, by every instance), the fleet (kept between batches, reloaded when
   `matcher.fleet_version` moved: `KeptFleet`), and the pending tasks (waiting or open; also
   unmatchable on a catalog change) when nodes register or the catalog changed;
3. fold the events in order (`services.matcher.batch.fold_batch`, pure);
4. write fleet, matches, tasks, closed matches and the `task.matched` / `task.unmatchable` events
   (outbox).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.event_batches import not_yet_handled, once_per_id, subscribe_event_batches
from services.common.runtime import ServiceContext, ServiceSpec, SkippedEntry
from services.config.holder import DocumentHolder
from services.matcher.batch import (
    CLOSING_TYPES,
    FLEET_TYPES,
    RELEVANT_TYPES,
    MatcherConfig,
    changes_catalog,
    fold_batch,
)
from services.matcher.decide import catalog_fingerprint
from services.matcher.store import SCHEMA, KeptFleet, load_pending, lock_fleet, save_effects
from shared.cards import Catalog, load_catalog
from shared.config import CARDS, catalog_of
from shared.events import Envelope, NodeRegistered
from shared.logging import get_logger
from shared.names import MATCHER_GROUP

MIGRATIONS = Path(__file__).parent / "sql"
BATCH_SIZE = 500

log = get_logger(__name__)


async def handle_batch(
    ctx: ServiceContext,
    catalogs: DocumentHolder[MatcherConfig],
    fleet: KeptFleet,
    events: Sequence[Envelope | SkippedEntry],
) -> None:
    """The numbered recipe of the module docstring, for one batch."""
    relevant = once_per_id(events, RELEVANT_TYPES)
    if not relevant:
        return
    async with ctx.transaction() as conn:
        todo = await not_yet_handled(conn, ctx, relevant, always=CLOSING_TYPES)
        if not todo:
            return
        new_catalog = any(changes_catalog(e) for e in todo)
        await lock_fleet(conn, exclusive=new_catalog or any(isinstance(e, FLEET_TYPES) for e in todo))
        await catalogs.refresh(conn)
        nodes = await fleet.nodes(conn)
        rematch = new_catalog or any(isinstance(e, NodeRegistered) for e in todo)
        pending = await load_pending(conn, unmatchable=new_catalog) if rematch else []
        effects = fold_batch(todo, catalogs.value, nodes, pending)
        await save_effects(conn, ctx.emitter, effects)
    log.debug("matcher batch", events=len(todo), matches=len(effects.matches))


def matcher_config(catalog: Catalog) -> MatcherConfig:
    return MatcherConfig(catalog, catalog_fingerprint(catalog))


def catalog_in_force(fallback: Catalog) -> DocumentHolder[MatcherConfig]:
    """The `cards` document in force (hot reloaded), or `fallback` until the config service seeded it."""
    return DocumentHolder(CARDS, lambda model, version: matcher_config(catalog_of(model, version)), matcher_config(fallback))


def build_spec(catalog: Catalog | None = None, *, batch_size: int = BATCH_SIZE) -> ServiceSpec:
    """The matcher's spec: the `cards` document in force, else `catalog` (default: the packaged one)."""

    async def setup(ctx: ServiceContext) -> None:
        catalogs = catalog_in_force(catalog or load_catalog())
        fleet = KeptFleet()

        async def on_events(events: list[Envelope | SkippedEntry]) -> None:
            await handle_batch(ctx, catalogs, fleet, events)

        subscribe_event_batches(ctx, group=MATCHER_GROUP, types=RELEVANT_TYPES, batch_size=batch_size, handle=on_events)

    return ServiceSpec(name="matcher", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)


SPEC = build_spec()
