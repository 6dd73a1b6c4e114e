"""Object storage (any S3-compatible store) on aiobotocore: versioned buckets and their objects.

Everything comes from `Settings`: endpoint, region, credentials and path/virtual addressing, so
the same code runs against SeaweedFS, MinIO or a cloud provider. Buckets are versioned: a put
never destroys the previous content, an old version is read back by its id, and a rollback is a
put of an old version's bytes (a new version; history never rewrites).

`create` is a conditional put (`If-None-Match: *`): it refuses to overwrite an existing key,
atomically on the server (checked with SeaweedFS 4.48: of 20 concurrent creates exactly one
wins; AWS S3 and recent MinIO support it too). Stores that ignore the header would overwrite
silently; `cardflow doctor`-style checks should verify it on new backends.

Usage (in a lifespan, never at import time):

    async with open_object_store(settings) as store:
        await store.ensure_bucket(CONFIG_BUCKET)
        version = await store.put(CONFIG_BUCKET, "policy.yaml", body)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from shared.settings import Settings, get_settings

_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchVersion", "NoSuchBucket"}
_BUCKET_EXISTS = {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}
_PRECONDITION_FAILED = {"PreconditionFailed", "412", "ConditionalRequestConflict"}



def header_safe(value: str) -> str:
    """`value` as S3 user metadata can carry it (an HTTP header: printable ASCII only). Anything
    else is written as a Python escape, so a Chinese reason stays readable (`\\u4e3a...`) and a
    control character in a reason cannot break the upload (found by the OpenAPI fuzz run)."""
    return "".join(c if " " <= c <= "~" else c.encode("ascii", "backslashreplace").decode() if c > "~" else f"\\x{ord(c):02x}"
                   for c in value)  # fmt: skip

class ObjectNotFoundError(KeyError):
    """No such key (or no such version of it)."""


class ObjectExistsError(RuntimeError):
    """`create` found the key already present and did not overwrite it."""


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """One version of an object (no body)."""

    key: str
    version_id: str | None
    etag: str
    size: int | None = None
    last_modified: datetime | None = None
    is_latest: bool | None = None


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object's body and what the store says about it."""

    key: str
    body: bytes
    version_id: str | None
    etag: str
    content_type: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of `session.create_client("s3", ...)` for these settings."""
    return {
        "endpoint_url": settings.s3_endpoint,
        "region_name": settings.s3_region,
        "aws_access_key_id": settings.s3_access_key.get_secret_value() if settings.s3_access_key else None,
        "aws_secret_access_key": settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None,
        "config": AioConfig(
            s3={"addressing_style": settings.s3_addressing_style},
            signature_version="s3v4",
            retries={"max_attempts": 5, "mode": "standard"},
            max_pool_connections=20,
        ),
    }


@contextlib.asynccontextmanager
async def open_object_store(settings: Settings | None = None) -> AsyncIterator[ObjectStore]:
    """An `ObjectStore` for cardflow's own buckets (CARDFLOW_S3_BUCKET_PREFIX applies), open for the `async with`."""
    settings = settings or get_settings()
    async with _client(settings) as client:
        yield ObjectStore(client, bucket_prefix=settings.s3_bucket_prefix)


@contextlib.asynccontextmanager
async def open_data_store(settings: Settings | None = None) -> AsyncIterator[ObjectStore]:
    """An `ObjectStore` for the users' data buckets, named exactly as a submission's `s3://bucket/...` inputs."""
    async with _client(settings or get_settings()) as client:
        yield ObjectStore(client)


@contextlib.asynccontextmanager
async def _client(settings: Settings) -> AsyncIterator[Any]:
    async with get_session().create_client("s3", **client_options(settings)) as client:
        yield client


class ObjectStore:
    """Versioned objects in S3-compatible buckets.

    Callers name buckets by cardflow's names (`CONFIG_BUCKET`, ...); the store adds the deployment's
    `bucket_prefix` (CARDFLOW_S3_BUCKET_PREFIX) on the wire, and `uri` shows where an object really is.
    """

    def __init__(self, client: Any, bucket_prefix: str = "") -> None:
        self._client = client
        self.bucket_prefix = bucket_prefix

    def bucket_name(self, bucket: str) -> str:
        """The bucket's name on the server (the deployment's prefix + cardflow's name)."""
        return f"{self.bucket_prefix}{bucket}"

    def uri(self, bucket: str, key: str = "") -> str:
        """`s3://<bucket as named on the server>/<key>`."""
        return f"s3://{self.bucket_name(bucket)}/{key}"

    async def ensure_bucket(self, bucket: str) -> None:
        """Create `bucket` if missing and turn versioning on (idempotent)."""
        try:
            await self._client.create_bucket(Bucket=self.bucket_name(bucket))
        except ClientError as exc:
            if _code(exc) not in _BUCKET_EXISTS:
                raise
        await self._client.put_bucket_versioning(Bucket=self.bucket_name(bucket), VersioningConfiguration={"Status": "Enabled"})

    async def is_versioned(self, bucket: str) -> bool:
        answer = await self._client.get_bucket_versioning(Bucket=self.bucket_name(bucket))
        return answer.get("Status") == "Enabled"

    async def put(
        self,
        bucket: str,
        key: str,
        body: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectVersion:
        """Store `body` as the new latest version of `key` (`metadata` values as `header_safe` writes them)."""
        safe = {name: header_safe(value) for name, value in (metadata or {}).items()}
        answer = await self._client.put_object(
            Bucket=self.bucket_name(bucket), Key=key, Body=body, ContentType=content_type, Metadata=safe
        )
        return ObjectVersion(key, answer.get("VersionId"), answer["ETag"], size=len(body), is_latest=True)

    async def create(
        self,
        bucket: str,
        key: str,
        body: bytes,
        *,
        content_type: str = "application/octet-stream",
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectVersion:
        """Store `body` only if `key` does not exist yet; else raise `ObjectExistsError`."""
        try:
            answer = await self._client.put_object(
                Bucket=self.bucket_name(bucket),
                Key=key,
                Body=body,
                ContentType=content_type,
                Metadata=dict(metadata or {}),
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if _code(exc) in _PRECONDITION_FAILED:
                raise ObjectExistsError(f"s3://{bucket}/{key} already exists") from exc
            raise
        return ObjectVersion(key, answer.get("VersionId"), answer["ETag"], size=len(body), is_latest=True)

    async def get(self, bucket: str, key: str, *, version_id: str | None = None) -> StoredObject:
        """The latest version of `key`, or the version `version_id`."""
        options = {"VersionId": version_id} if version_id else {}
        try:
            answer = await self._client.get_object(Bucket=self.bucket_name(bucket), Key=key, **options)
        except ClientError as exc:
            raise _not_found_or(exc, bucket, key, version_id) from exc
        async with answer["Body"] as stream:
            body = await stream.read()
        return StoredObject(
            key=key,
            body=body,
            version_id=answer.get("VersionId"),
            etag=answer["ETag"],
            content_type=answer.get("ContentType"),
            metadata=dict(answer.get("Metadata") or {}),
        )

    async def head(self, bucket: str, key: str, *, version_id: str | None = None) -> ObjectVersion | None:
        """What the store knows about `key` (or one version of it), or None if it does not exist."""
        options = {"VersionId": version_id} if version_id else {}
        try:
            answer = await self._client.head_object(Bucket=self.bucket_name(bucket), Key=key, **options)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise
        return ObjectVersion(
            key, answer.get("VersionId"), answer["ETag"], answer.get("ContentLength"), answer.get("LastModified")
        )

    async def exists(self, bucket: str, key: str) -> bool:
        return await self.head(bucket, key) is not None

    async def list_keys(self, bucket: str, prefix: str) -> list[ObjectVersion]:
        """The latest version of every key under `prefix`, in key order."""
        found: list[ObjectVersion] = []
        paginator = self._client.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=self.bucket_name(bucket), Prefix=prefix):
            found += [ObjectVersion(item["Key"], None, item["ETag"], item.get("Size"), item.get("LastModified"))
                      for item in page.get("Contents", [])]  # fmt: skip
        return found

    async def delete_version(self, bucket: str, key: str, version_id: str) -> None:
        """Remove ONE version of `key` for good (other versions stay; no delete marker is written)."""
        await self._client.delete_object(Bucket=self.bucket_name(bucket), Key=key, VersionId=version_id)

    async def list_versions(self, bucket: str, key: str) -> list[ObjectVersion]:
        """Every version of exactly `key`, newest first as the store lists them (no delete markers)."""
        versions: list[ObjectVersion] = []
        paginator = self._client.get_paginator("list_object_versions")
        async for page in paginator.paginate(Bucket=self.bucket_name(bucket), Prefix=key):
            versions += [_version(item) for item in page.get("Versions", []) if item["Key"] == key]
        return versions


def _version(item: Mapping[str, Any]) -> ObjectVersion:
    return ObjectVersion(
        key=item["Key"],
        version_id=item.get("VersionId"),
        etag=item["ETag"],
        size=item.get("Size"),
        last_modified=item.get("LastModified"),
        is_latest=item.get("IsLatest"),
    )


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _not_found_or(exc: ClientError, bucket: str, key: str, version_id: str | None) -> Exception:
    if _code(exc) in _NOT_FOUND:
        suffix = f" (version {version_id})" if version_id else ""
        return ObjectNotFoundError(f"s3://{bucket}/{key}{suffix}")
    return exc
