"""Object storage against the real S3-compatible server: versioning, conditional create, head.

One bucket per module (each bucket costs the embedded SeaweedFS a collection of volumes);
keys are unique per test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shared.embedded import Endpoints
from shared.settings import Settings
from shared.storage import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
    client_options,
    open_data_store,
    open_object_store,
)
from tests.helpers.delivery_support import unique

BUCKET = unique("cf-test").replace("_", "-")


@pytest.fixture
async def store(backends: Endpoints) -> AsyncIterator[ObjectStore]:
    async with open_object_store(backends.settings()) as opened:
        await opened.ensure_bucket(BUCKET)
        yield opened


async def test_ensure_bucket_is_idempotent_and_turns_versioning_on(store: ObjectStore) -> None:
    await store.ensure_bucket(BUCKET)
    assert await store.is_versioned(BUCKET)


async def test_versioning_keeps_every_version_and_returns_an_old_one_by_id(store: ObjectStore) -> None:
    key = f"{unique('policy')}.yaml"
    written = [await store.put(BUCKET, key, f"headroom: 0.{n}\n".encode(), metadata={"actor": f"user:{n}"}) for n in range(3)]

    versions = await store.list_versions(BUCKET, key)
    oldest = await store.get(BUCKET, key, version_id=written[0].version_id)
    latest = await store.get(BUCKET, key)

    assert [v.version_id for v in versions] == [w.version_id for w in reversed(written)]
    assert len({w.version_id for w in written}) == 3
    assert (oldest.body, oldest.metadata) == (b"headroom: 0.0\n", {"actor": "user:0"})
    assert (latest.body, latest.version_id) == (b"headroom: 0.2\n", written[2].version_id)


async def test_list_versions_of_a_key_ignores_keys_sharing_its_prefix(store: ObjectStore) -> None:
    key = unique("cards")
    await store.put(BUCKET, key, b"a")
    await store.put(BUCKET, f"{key}-other", b"b")
    assert [v.key for v in await store.list_versions(BUCKET, key)] == [key]


async def test_conditional_create_refuses_to_overwrite(store: ObjectStore) -> None:
    key = unique("manifest")
    created = await store.create(BUCKET, key, b"first")

    with pytest.raises(ObjectExistsError):
        await store.create(BUCKET, key, b"second")

    assert (await store.get(BUCKET, key)).body == b"first"
    assert [v.version_id for v in await store.list_versions(BUCKET, key)] == [created.version_id]


async def test_concurrent_conditional_creates_have_exactly_one_winner(store: ObjectStore) -> None:
    key = unique("race")

    async def attempt(n: int) -> int | None:
        try:
            await store.create(BUCKET, key, str(n).encode())
        except ObjectExistsError:
            return None
        return n

    winners = [n for n in await asyncio.gather(*(attempt(n) for n in range(10))) if n is not None]

    assert len(winners) == 1
    assert (await store.get(BUCKET, key)).body == str(winners[0]).encode()


async def test_head_and_exists_tell_present_from_missing(store: ObjectStore) -> None:
    key = unique("present")
    version = await store.put(BUCKET, key, b"12345", content_type="text/plain")

    head = await store.head(BUCKET, key)

    assert head is not None and (head.size, head.version_id) == (5, version.version_id)
    assert await store.exists(BUCKET, key)
    assert not await store.exists(BUCKET, unique("missing"))
    assert await store.head(BUCKET, unique("missing")) is None
    with pytest.raises(ObjectNotFoundError):
        await store.get(BUCKET, unique("missing"))


def test_client_options_follow_the_settings() -> None:
    settings = Settings(
        s3_endpoint="http://s3.example:9000", s3_access_key="ak", s3_secret_key="sk",
        s3_region="eu-west-3", s3_addressing_style="virtual",
    )  # fmt: skip
    options = client_options(settings)
    assert (options["endpoint_url"], options["region_name"]) == ("http://s3.example:9000", "eu-west-3")
    assert (options["aws_access_key_id"], options["aws_secret_access_key"]) == ("ak", "sk")
    assert options["config"].s3 == {"addressing_style": "virtual"}


async def test_a_bucket_prefix_names_cardflows_buckets_on_the_server_and_data_buckets_stay_as_written(
    backends: Endpoints,
) -> None:
    prefix = BUCKET.removeprefix("cf-test-")[-12:] + "-"
    settings = backends.settings().model_copy(update={"s3_bucket_prefix": prefix})
    key = unique("policy")
    async with open_object_store(settings) as own, open_data_store(settings) as data:
        await own.ensure_bucket("cf-own")
        await own.put("cf-own", key, b"headroom: 0.1\n")
        on_server = await data.get(f"{prefix}cf-own", key)  # the data store names buckets as written
        assert on_server.body == b"headroom: 0.1\n"
        assert own.uri("cf-own", key) == f"s3://{prefix}cf-own/{key}"
        with pytest.raises(ObjectNotFoundError):
            await data.get("cf-own", key)


def test_a_bucket_prefix_that_s3_would_refuse_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="s3_bucket_prefix"):
        Settings(s3_bucket_prefix="Acme_")
