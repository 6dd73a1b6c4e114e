"""The config service (`cardflow service config`): seeds the documents, relays the config outbox.

Start-up:

1. the runtime applies the `config` schema (versions, exports) and its outbox;
2. the buckets `CONFIG_BUCKET` and `REPORTS_BUCKET` are created if missing, versioning on;
3. each document that has no version yet is written as version 1 from what is in force
   (`seeding.seed_documents`): the dispatcher's preset and `CARDFLOW_DISPATCHER_*` overrides as
   this process sees them, and the packaged card catalog;
4. then the outbox relay publishes `config.changed` / `template.changed` of every writer (the
   console's HTTP API writes changes into the same outbox), and once a UTC day (from
   `CARDFLOW_EXPORT_HOUR_UTC`, default 0) the task list and demand plan are exported to the
   reports bucket (`exports.run_daily_export`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import asyncpg

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.runtime import ServiceContext, ServiceSpec
from services.config.exports import run_daily_export
from services.config.seeding import seed_documents
from services.config.store import SCHEMA, ConfigStore
from shared.names import CONFIG_BUCKET, REPORTS_BUCKET
from shared.settings import Settings
from shared.storage import open_object_store

MIGRATIONS = Path(__file__).parent / "sql"
SEED_ACTOR = "service:config"


async def open_config_store(
    pool: asyncpg.Pool, settings: Settings, producer: str, resources: contextlib.AsyncExitStack
) -> ConfigStore | None:
    """A `ConfigStore` whose S3 client lives as long as `resources` (None without an S3 endpoint)."""
    if not settings.s3_endpoint:
        return None
    objects = await resources.enter_async_context(open_object_store(settings))
    for bucket in (CONFIG_BUCKET, REPORTS_BUCKET):
        await objects.ensure_bucket(bucket)
    return ConfigStore(pool, objects, producer)


async def setup(ctx: ServiceContext) -> None:
    objects = await ctx.resources.enter_async_context(open_object_store(ctx.settings))
    for bucket in (CONFIG_BUCKET, REPORTS_BUCKET):
        await objects.ensure_bucket(bucket)
    store = ConfigStore(ctx.pool, objects, ctx.producer)
    ctx.state["config_store"] = store
    await seed_documents(store, actor=SEED_ACTOR)
    knobs = ConfigServiceSettings()

    async def daily_export(ctx: ServiceContext) -> None:
        await run_daily_export(ctx.pool, objects, hour_utc=knobs.hour_utc)

    ctx.every(knobs.check_s, daily_export, name="daily-export")


class ConfigServiceSettings(BaseSettings):
    """`CARDFLOW_EXPORT_*`: when the daily export of the task list runs."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_EXPORT_", env_file=None, extra="ignore", frozen=True)

    hour_utc: int = Field(0, ge=0, le=23, description="the daily export runs once a day from this UTC hour on")
    check_s: float = Field(60.0, gt=0, description="how often the service checks whether it is due")


SPEC = ServiceSpec(name="config", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)
