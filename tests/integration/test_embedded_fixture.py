"""The session `backends` fixture: every backend answers with its real protocol and versioned S3 works."""

from __future__ import annotations

import asyncpg
import redis.asyncio as aioredis
from aiobotocore.session import get_session

from shared.embedded import Endpoints, probe_backends, s3_client_kwargs
from shared.events.envelope import new_event_id
from shared.settings import get_settings


async def test_every_backend_answers(backends: Endpoints) -> None:
    health = await probe_backends(backends)

    assert [h.name for h in health] == ["redis", "postgres", "s3"]
    assert all(h.ok for h in health), health
    assert all(h.version for h in health)


async def test_redis_round_trips_a_stream_entry(backends: Endpoints) -> None:
    stream = f"test:{new_event_id()}"
    client = aioredis.from_url(backends.redis_url)
    try:
        entry_id = await client.xadd(stream, {"k": "v"})
        entries = await client.xrange(stream)
    finally:
        await client.aclose()

    assert entries == [(entry_id, {b"k": b"v"})]


async def test_postgres_runs_in_the_cardflow_database(backends: Endpoints) -> None:
    conn = await asyncpg.connect(backends.database_url)
    try:
        assert await conn.fetchval("SELECT current_database()") == "cardflow"
        assert await conn.fetchval("SELECT current_setting('server_version_num')::int") >= 140000
    finally:
        await conn.close()


async def test_s3_keeps_every_version_of_an_object(backends: Endpoints) -> None:
    bucket = f"versions-{new_event_id().lower()}"
    async with get_session().create_client("s3", **s3_client_kwargs(backends)) as s3:
        await s3.create_bucket(Bucket=bucket)
        await s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        first = (await s3.put_object(Bucket=bucket, Key="policy.yaml", Body=b"one"))["VersionId"]
        await s3.put_object(Bucket=bucket, Key="policy.yaml", Body=b"two")
        listed = await s3.list_object_versions(Bucket=bucket, Prefix="policy.yaml")
        old = await s3.get_object(Bucket=bucket, Key="policy.yaml", VersionId=first)
        old_body = await old["Body"].read()
        latest = await s3.get_object(Bucket=bucket, Key="policy.yaml")
        latest_body = await latest["Body"].read()

    assert len(listed["Versions"]) == 2
    assert (old_body, latest_body) == (b"one", b"two")


def test_endpoints_render_as_settings_and_env(backends: Endpoints) -> None:
    settings = backends.settings()

    assert settings.redis_url == backends.redis_url
    assert settings.database_dsn == backends.database_url
    assert Endpoints.from_env(backends.as_env()) == backends
    assert backends.s3_secret_key not in repr(backends)
    assert backends.database_url not in repr(backends)


def test_backends_env_exports_the_settings(backends_env: Endpoints) -> None:
    assert get_settings().redis_url == backends_env.redis_url
    assert get_settings().s3_endpoint == backends_env.s3_endpoint
