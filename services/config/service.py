"""The config service (`cardflow service config`): seeds the documents, relays the config outbox.

Start-up:

1. the runtime applies the `config` schema (versions, exports) and its outbox;
2. the buckets `CONFIG_BUCKET` and `REPORTS_BUCKET` are created if missing, versioning on;
3. each document that has no version yet is written as version 1 from what is in force
   (`seeding.seed_documents`): the dispatcher's preset and `CARDFLOW_DISPATCHER_*` overrides as
   this process sees them, and the packaged card catalog; then the demo's policy is put in force
   (`cardflow up --demo` sets `CARDFLOW_DEMO_TIME_SCALE`) or, on any other start, taken back
   (`seeding.reconcile_demo_policy`), each as a recorded change by `system:demo`;
4. then the outbox relay publishes `config.changed` / `template.changed` of every writer (the
   console's HTTP API writes changes into the same outbox), and once a UTC day (from
   `CARDFLOW_EXPORT_HOUR_UTC`, default 0) the task list and demand plan are exported to the
   reports bucket (`exports.run_daily_export`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import asyncpg

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.runtime import ServiceContext, ServiceSpec
from services.config.exports import run_daily_export
from services.config.seeding import reconcile_demo_policy, seed_documents, warn_ignored_env_knobs
from services.config.store import SCHEMA, ConfigStore
from services.dispatcher.config import DispatcherConfig
from shared.events import utcnow
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


class ConfigServiceSettings(BaseSettings):
    """`CARDFLOW_EXPORT_*`: when the daily export of the task list runs."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_EXPORT_", env_file=None, extra="ignore", frozen=True)

    hour_utc: int = Field(0, ge=0, le=23, description="the daily export runs once a day from this UTC hour on")
    check_s: float = Field(60.0, gt=0, description="how often the service checks whether it is due")
    daily: bool = Field(True, description="false: no daily export (`cardflow export` still writes one on demand)")


class DemoSettings(BaseSettings):
    """`CARDFLOW_DEMO_TIME_SCALE`: set by `cardflow up --demo` for this service only."""

    model_config = SettingsConfigDict(env_prefix="CARDFLOW_DEMO_", env_file=None, extra="ignore", frozen=True)

    time_scale: float | None = Field(
        None, gt=0, description="the demo's agents run this many times faster than the clock: the policy's waiting"
        " times are scaled alike (a recorded change by system:demo); unset: a demo's values are taken back",
    )


def make_spec(exports: ConfigServiceSettings | None = None, *, seed_from: DispatcherConfig | None = None,
              demo: DemoSettings | None = None, clock: Callable[[], datetime] = utcnow) -> ServiceSpec:  # fmt: skip
    """The config service; each part not given is read from the environment at start.

    `seed_from` is the dispatcher configuration version 1 of `policy` is seeded from (`cardflow up`
    gives this process the dispatcher's environment); `clock` is the daily export's (tests move it)."""

    async def setup(ctx: ServiceContext) -> None:
        store = await open_config_store(ctx.pool, ctx.settings, ctx.producer, ctx.resources)
        if store is None:
            raise RuntimeError("the config service keeps documents in object storage: set CARDFLOW_S3_ENDPOINT")
        ctx.state["config_store"] = store
        dispatcher = seed_from or DispatcherConfig()
        await seed_documents(store, actor=SEED_ACTOR, config=dispatcher)
        await reconcile_demo_policy(store, (demo or DemoSettings()).time_scale)
        await warn_ignored_env_knobs(store, dispatcher)
        knobs = exports or ConfigServiceSettings()
        if not knobs.daily:
            return

        async def daily_export(ctx: ServiceContext) -> None:
            await run_daily_export(ctx.pool, store.objects, hour_utc=knobs.hour_utc, now=clock())

        ctx.every(knobs.check_s, daily_export, name="daily-export")

    return ServiceSpec(name="config", schema=SCHEMA, migrations=MIGRATIONS, setup=setup)


SPEC = make_spec()
