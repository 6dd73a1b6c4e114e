"""The config store: versioned documents in the S3 bucket, indexed in schema `config`, announced by events.

One change (apply, set, rollback, seed) is three writes that a crash must not split:

1. validate the new text (pure; a bad document is refused with every problem, nothing written);
2. PUT it as a new version of `<name>.yaml` in `CONFIG_BUCKET` (metadata: document, version,
   sha256, actor) — the new S3 version exists, but nothing refers to it yet;
3. ONE transaction: INSERT the row (name, base + 1) with the text, sha256 and S3 version id, and
   the `config.changed` / `template.changed` event into the outbox. This is the commit point.

A crash after 2 leaves an S3 version no row names: it was never in force, nothing reads it
(services read the row's text; `config show` reads the row's S3 version id) and `dangling()`
lists it. Two changes on the same base both PUT, but the primary key (name, version) lets one
INSERT win; the loser deletes its own S3 version and gets `StaleBaseError` — no lost update.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import quote

import asyncpg

from services.common.runtime import Emitter
from shared.config import (
    DocumentKind,
    DocumentName,
    ValidDocument,
    set_values,
    sha256_of,
    unified_diff,
    validate_document,
)
from shared.events import ConfigChanged, Emission, TemplateChanged
from shared.events.config import MAX_DIFF_CHARS, ConfigAction
from shared.events.subjects import config_subject, template_subject
from shared.logging import get_logger
from shared.names import CONFIG_BUCKET
from shared.storage import ObjectStore, ObjectVersion

SCHEMA = "config"
CONTENT_TYPE = "application/yaml; charset=utf-8"
_COLUMNS = (
    "name, version, base_version, action, rolled_back_to, sha256, s3_key, s3_version_id, actor, reason, event_id, at"
)

log = get_logger(__name__)


class StaleBaseError(RuntimeError):
    """The change was based on a version that is no longer the one in force (someone changed it first)."""

    def __init__(self, name: DocumentName, base: int | None, head: VersionRecord | None) -> None:
        self.name, self.base, self.head = name, base, head
        now = f"version {head.version} by {head.actor} at {head.at:%Y-%m-%d %H:%M:%S}Z ({head.reason})" if head else "no version"
        based = f"version {base}" if base else "no version"
        super().__init__(
            f"{name}: your change is based on {based}, but {now} is in force; nothing was written. "
            f"Look at `cardflow config diff {name} {base or 1} {head.version if head else 1}`, then apply again "
            "on the version in force"
        )


class NothingToChangeError(ValueError):
    """The new content is identical to the version in force: no version is written."""


class UnknownVersionError(LookupError):
    """No such document, or no such version of it."""


class BucketMismatchError(RuntimeError):
    """The bucket's object does not match the sha256 the row recorded (tampered or a different bucket)."""


@dataclass(frozen=True, slots=True)
class VersionRecord:
    """One version of one document, as its row records it (`content` only when loaded)."""

    name: str
    version: int
    base_version: int | None
    action: ConfigAction
    rolled_back_to: int | None
    sha256: str
    s3_key: str
    s3_version_id: str
    actor: str
    reason: str
    event_id: str
    at: datetime
    content: str | None = None

    def summary(self) -> dict[str, Any]:
        """The JSON of `config history`: who, when, why, and where the content is."""
        return {
            "name": self.name, "version": self.version, "at": self.at.isoformat(), "actor": self.actor,
            "reason": self.reason, "action": self.action.value, "base_version": self.base_version,
            "rolled_back_to": self.rolled_back_to, "sha256": self.sha256, "s3_key": self.s3_key,
            "s3_version_id": self.s3_version_id,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Change:
    """What a change wrote: the new version, and the diff from the one it replaced."""

    record: VersionRecord
    diff: str


class ConfigStore:
    """Versioned documents: read, change, roll back, list — one `ConfigStore` per process."""

    def __init__(
        self, pool: asyncpg.Pool, objects: ObjectStore, producer: str, *, bucket: str = CONFIG_BUCKET, prefix: str = ""
    ) -> None:
        self.pool = pool
        self.objects = objects
        self.producer = producer
        self.bucket = bucket
        self.prefix = prefix  # tests keep their objects apart in one bucket

    def key_of(self, name: DocumentName) -> str:
        """The document's object key in the bucket."""
        return f"{self.prefix}{name.object_key}"

    # ---- reads ------------------------------------------------------------------------------------

    async def head(self, name: DocumentName, *, content: bool = False) -> VersionRecord | None:
        """The version in force (the highest), or None when the document has no version yet."""
        row = await self.pool.fetchrow(
            f"SELECT {_COLUMNS}{', content' if content else ''} FROM {SCHEMA}.versions"
            " WHERE name = $1 ORDER BY version DESC LIMIT 1",
            name.name,
        )
        return _record(row) if row else None

    async def version(self, name: DocumentName, version: int | None = None) -> VersionRecord:
        """Version `version` (default: the one in force), with its content."""
        if version is None:
            record = await self.head(name, content=True)
        else:
            row = await self.pool.fetchrow(
                f"SELECT {_COLUMNS}, content FROM {SCHEMA}.versions WHERE name = $1 AND version = $2",
                name.name, version,
            )  # fmt: skip
            record = _record(row) if row else None
        if record is None:
            raise UnknownVersionError(await self._missing(name, version))
        return record

    async def history(self, name: DocumentName, *, content: bool = False) -> list[VersionRecord]:
        """Every version of the document, oldest first (rollbacks are versions too)."""
        rows = await self.pool.fetch(
            f"SELECT {_COLUMNS}{', content' if content else ''} FROM {SCHEMA}.versions WHERE name = $1 ORDER BY version",
            name.name,
        )
        return [_record(row) for row in rows]

    async def documents(self, kind: DocumentKind | None = None) -> list[VersionRecord]:
        """The version in force of every document (of `kind`), by name."""
        rows = await self.pool.fetch(
            f"SELECT DISTINCT ON (name) {_COLUMNS} FROM {SCHEMA}.versions"
            " WHERE $1::text IS NULL OR name = $1 OR ($1 = 'template' AND name LIKE 'templates/%')"
            " ORDER BY name, version DESC",
            kind.value if kind else None,
        )
        return [_record(row) for row in rows]

    async def read_from_bucket(self, name: DocumentName, version: int | None = None) -> tuple[VersionRecord, str]:
        """Version `version` (default: in force) as the BUCKET holds it, checked against the row's sha256."""
        record = await self.version(name, version)
        stored = await self.objects.get(self.bucket, record.s3_key, version_id=record.s3_version_id)
        text = stored.body.decode()
        found = sha256_of(text)
        if found != record.sha256:
            raise BucketMismatchError(
                f"s3://{self.bucket}/{record.s3_key} version {record.s3_version_id} has sha256 {found[:12]}…, "
                f"but {name} version {record.version} recorded {record.sha256[:12]}…: the object was replaced "
                "outside cardflow, or this is not the installation's bucket"
            )
        return record, text

    async def diff(self, name: DocumentName, old: int, new: int | None = None) -> str:
        """Unified diff from version `old` to `new` (default: the version in force)."""
        before, after = await self.version(name, old), await self.version(name, new)
        return unified_diff(before.content or "", after.content or "", name.name, f"v{before.version}", f"v{after.version}")

    async def dangling(self, name: DocumentName) -> list[ObjectVersion]:
        """S3 versions of the document's key that no row names: changes that never committed."""
        known = {record.s3_version_id for record in await self.history(name)}
        versions = await self.objects.list_versions(self.bucket, self.key_of(name))
        return [v for v in versions if v.version_id not in known]

    # ---- changes --------------------------------------------------------------------------------

    async def apply(self, name: DocumentName, text: str, *, base: int | None, actor: str, reason: str) -> Change:
        """Make `text` the new version. `base` = the version the change was made on (None: the one in force now)."""
        return await self.change(validate_document(name, text), base=base, action=ConfigAction.APPLIED,
                                 actor=actor, reason=reason)

    async def set(self, name: DocumentName, assignments: list[str], *, base: int | None, actor: str, reason: str) -> Change:
        """Set `key.path=value` pairs on the version in force (comments and order kept)."""
        head = await self.version(name)
        if base is not None and base != head.version:
            raise StaleBaseError(name, base, head)
        valid = validate_document(name, set_values(head.content or "", assignments))
        return await self.change(valid, base=head.version, action=ConfigAction.SET, actor=actor, reason=reason)

    async def rollback(self, name: DocumentName, to: int, *, base: int | None, actor: str, reason: str) -> Change:
        """Version `to`'s content as a new version (history is never rewritten)."""
        old = await self.version(name, to)
        valid = validate_document(name, old.content or "")
        return await self.change(valid, base=base, action=ConfigAction.ROLLED_BACK, actor=actor, reason=reason,
                                 rolled_back_to=to)

    async def seed(self, valid: ValidDocument, *, actor: str, reason: str) -> Change | None:
        """Write version 1 if the document has none yet (another writer seeding first is fine: None)."""
        if await self.head(valid.name) is not None:
            return None
        try:
            return await self.change(valid, base=None, action=ConfigAction.SEEDED, actor=actor, reason=reason,
                                     first_only=True)
        except StaleBaseError:
            return None

    async def change(
        self, valid: ValidDocument, *, base: int | None, action: ConfigAction, actor: str, reason: str,
        rolled_back_to: int | None = None, first_only: bool = False,
    ) -> Change:
        """The three steps of the module docstring for an already validated document."""
        name = valid.name
        head = await self.head(name, content=True)
        if (base is not None and (head is None or head.version != base)) or (first_only and head is not None):
            raise StaleBaseError(name, base, head)
        if head is not None and head.sha256 == valid.sha256:
            raise NothingToChangeError(f"{name}: identical to version {head.version}, which is in force; nothing written")
        version = head.version + 1 if head else 1
        put = await self.put_object(valid, version, actor)
        record = VersionRecord(
            name=name.name, version=version, base_version=head.version if head else None, action=action,
            rolled_back_to=rolled_back_to, sha256=valid.sha256, s3_key=self.key_of(name),
            s3_version_id=put.version_id or "", actor=actor, reason=reason, event_id="", at=datetime.min,
            content=valid.text,
        )  # fmt: skip
        diff = unified_diff(head.content if head else "", valid.text, name.name,
                            f"v{head.version}" if head else "none", f"v{version}")
        try:
            committed = await self._commit(name, record, diff)
        except asyncpg.UniqueViolationError:
            await self._forget(name, put)
            raise StaleBaseError(name, base if base is not None else (head.version if head else None),
                                 await self.head(name)) from None
        log.info("config changed", document=name.name, version=version, action=action.value, actor=actor)
        return Change(committed, diff)

    async def put_object(self, valid: ValidDocument, version: int, actor: str) -> ObjectVersion:
        """Step 2 alone: the new content as a new S3 version (never in force until its row commits)."""
        put = await self.objects.put(
            self.bucket, self.key_of(valid.name), valid.text.encode(), content_type=CONTENT_TYPE,
            metadata={"cardflow-document": valid.name.name, "cardflow-version": str(version),
                      "cardflow-sha256": valid.sha256, "cardflow-actor": quote(actor[:200], safe=":@/._-")},
        )  # fmt: skip
        if not put.version_id:
            raise RuntimeError(f"bucket {self.bucket} returned no version id: turn versioning on (ensure_bucket does)")
        return put

    async def _commit(self, name: DocumentName, record: VersionRecord, diff: str) -> VersionRecord:
        """Step 3: the row and its event, in one transaction."""
        emitter = Emitter(SCHEMA, self.producer, record.actor)
        async with self.pool.acquire() as conn, conn.transaction():
            [event] = await emitter.emit(conn, [_announcement(name, record, diff)])
            committed = replace(record, event_id=event.event_id, at=event.occurred_at)
            await conn.execute(
                f"INSERT INTO {SCHEMA}.versions ({_COLUMNS}, content)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                committed.name, committed.version, committed.base_version, committed.action.value,
                committed.rolled_back_to, committed.sha256, committed.s3_key, committed.s3_version_id,
                committed.actor, committed.reason, committed.event_id, committed.at, committed.content,
            )  # fmt: skip
        return committed

    async def _forget(self, name: DocumentName, put: ObjectVersion) -> None:
        """Delete the S3 version of a change that lost the race (best effort: `dangling()` shows leftovers)."""
        try:
            await self.objects.delete_version(self.bucket, self.key_of(name), put.version_id or "")
        except Exception:  # noqa: BLE001 - the refusal matters more; the leftover is harmless and listed
            log.warning("could not delete the S3 version of a refused change", document=name.name,
                        s3_version_id=put.version_id, exc_info=True)

    async def _missing(self, name: DocumentName, version: int | None) -> str:
        head = await self.head(name)
        if head is None:
            return f"{name} has no version yet"
        return f"{name} has no version {version}; versions are 1 to {head.version}"


def _announcement(name: DocumentName, record: VersionRecord, diff: str) -> Emission:
    is_template = name.kind is DocumentKind.TEMPLATE
    shown = diff if len(diff) <= MAX_DIFF_CHARS else diff[:MAX_DIFF_CHARS] + "\n… (cut; `cardflow config diff` shows it whole)\n"
    data = {
        "name": name.name, "old_version": record.base_version, "new_version": record.version,
        "action": record.action, "rolled_back_to": record.rolled_back_to, "s3_key": record.s3_key,
        "s3_version_id": record.s3_version_id, "sha256": record.sha256, "diff": shown, "reason": record.reason,
    }  # fmt: skip
    if is_template:
        return Emission(TemplateChanged, template_subject(name.template or ""), data, actor=record.actor)
    return Emission(ConfigChanged, config_subject(name.name), data, actor=record.actor)


def _record(row: asyncpg.Record) -> VersionRecord:
    values = dict(row)
    values["action"] = ConfigAction(values["action"])
    return VersionRecord(**values)


