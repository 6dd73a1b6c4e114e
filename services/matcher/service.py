"""The matcher service process: `cardflow service matcher` runs `SPEC`.

One batch subscriber on `cf:events` (group `matcher`); each batch is one transaction:

1. record the decision events as consumed (duplicates drop out; closing events are idempotent
   status updates and skip the inbox);
2. take the fleet lock (exclusive if the batch registers or loses nodes), load the fleet, and the
   pending tasks (waiting or open) when nodes register;
3. fold the events in order (`services.matcher.batch.fold_batch`, pure);
4. write fleet, matches, tasks, closed matches and the `task.matched` / `task.unmatchable` events
   (outbox).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.common.event_batches import not_yet_handled, once_per_id, subscribe_event_batches
from services.common.runtime import ServiceContext, ServiceSpec, SkippedEntry
from services.matcher.batch import (
    CLOSING_TYPES,
    FLEET_TYPES,
    RELEVANT_TYPES,
    MatcherConfig,
    fold_batch,
)
from services.matcher.decide import catalog_fingerprint
from services.matcher.store import SCHEMA, load_nodes, load_pending, lock_fleet, save_effects
from shared.cards import Catalog, load_catalog
from shared.events import Envelope, NodeRegistered
from shared.logging import get_logger
from shared.names import MATCHER_GROUP

MIGRATIONS = Path(__file__).parent / "sql"
BATCH_SIZE = 500

log = get_logger(__name__)


async def handle_batch(
    ctx: ServiceContext, config: MatcherConfig, events: Sequence[Envelope | SkippedEntry]
) -> None:
    """The numbered recipe of the module docstring, for one batch."""
    relevant = once_per_id(events, RELEVANT_TYPES)
    if not relevant:
        return
    async with ctx.transaction() as conn:
        todo = await not_yet_handled(conn, ctx, relevant, always=CLOSING_TYPES)
        if not todo:
            return
        await lock_fleet(conn, exclusive=any(isinstance(e, FLEET_TYPES) for e in todo))
        nodes = await load_nodes(conn)
        pending = await load_pending(conn) if any(isinstance(e, NodeRegistered) for e in todo) else []
        effects = fold_batch(todo, config, nodes, pending)
        await save_effects(conn, ctx.emitter, effects)
    log.debug("matcher batch", events=len(todo), matches=len(effects.matches))


def build_spec(catalog: Catalog | None = None, *, batch_size: int = BATCH_SIZE) -> ServiceSpec:
    """The matcher's spec over `catalog` (default: the packaged card catalog)."""

    async def setup(ctx: ServiceContext) -> None:
        chosen = catalog or load_catalog()
        config = MatcherConfig(chosen, catalog_fingerprint(chosen))

        async def on_events(events: list[Envelope | SkippedEntry]) -> None:
            await handle_batch(ctx, config, events)

        subscribe_event_batches(ctx, group=MATCHER_GROUP, types=RELEVANT_TYPES, batch_size=batch_size, handle=on_events)

    return ServiceSpec(name="matcher", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)


SPEC = build_spec()
