"""The config service (`cardflow service config`): seeds the documents, relays the config outbox.

Start-up:

1. the runtime applies the `config` schema (versions, exports) and its outbox;
2. the buckets `CONFIG_BUCKET` and `REPORTS_BUCKET` are created if missing, versioning on;
3. each document that has no version yet is written as version 1 from what is in force
   (`seeding.seed_documents`): the dispatcher's preset and `CARDFLOW_DISPATCHER_*` overrides as
   this process sees them, and the packaged card catalog;
4. then the outbox relay publishes `config.changed` / `template.changed` of every writer (the
   console's HTTP API writes changes into the same outbox).
"""

from __future__ import annotations

from pathlib import Path

from services.common.runtime import ServiceContext, ServiceSpec
from services.config.seeding import seed_documents
from services.config.store import SCHEMA, ConfigStore
from shared.names import CONFIG_BUCKET, REPORTS_BUCKET
from shared.storage import open_object_store

MIGRATIONS = Path(__file__).parent / "sql"
SEED_ACTOR = "service:config"


async def setup(ctx: ServiceContext) -> None:
    objects = await ctx.resources.enter_async_context(open_object_store(ctx.settings))
    for bucket in (CONFIG_BUCKET, REPORTS_BUCKET):
        await objects.ensure_bucket(bucket)
    store = ConfigStore(ctx.pool, objects, ctx.producer)
    ctx.state["config_store"] = store
    await seed_documents(store, actor=SEED_ACTOR)


SPEC = ServiceSpec(name="config", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)
