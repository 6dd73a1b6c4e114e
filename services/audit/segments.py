"""Archive segments: runs of archived events rolled to the archive bucket, and their checks.

A segment is the events `first_seq..last_seq` of `audit.events` as gzip'd JSON lines (one event's
canonical JSON per line, in sequence order: `zcat seg.jsonl.gz | jq` reads it) plus a manifest
(first/last sequence and hash, the hash before the first line, the object's sha256). Anyone can
check a segment without the database: start from the manifest's `prev_hash` and link every line,
`hash = sha256(prev_hash || line)`; the last one must be the manifest's `last_hash`.

- `roll_due_segments` (the ledger's periodic loop): one roller at a time (advisory lock), a
  segment when `max_events` are waiting or the oldest waiting event is `max_age` old; objects are
  created with `If-None-Match` (never overwritten) under `segments/<archive id>/`, then recorded in
  `audit.segments` (a crash in between re-creates byte-identical objects: gzip without a time);
- `check_segment` (pure) names what does not hold between a segment's object, its manifest, its
  `audit.segments` row and the archived rows it covers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from services.audit.chain import link
from shared.delivery.migrations import advisory_key
from shared.events import canonical_json
from shared.logging import get_logger
from shared.names import ARCHIVE_BUCKET
from shared.storage import ObjectExistsError, ObjectNotFoundError, ObjectStore

SCHEMA = "audit"
ROLL_LOCK = advisory_key("roll-segments", SCHEMA)
SEGMENT_FORMAT = (
    "gzip'd JSON lines: one event's canonical JSON per line, in sequence order;"
    " hash_n = sha256(hash_{n-1} || line_n) as lower-case hex, starting from prev_hash"
)

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SegmentPolicy:
    """When a segment is rolled: `max_events` are waiting, or the oldest waiting is `max_age` old."""

    max_events: int = 10_000
    max_age: timedelta = timedelta(hours=1)

    def is_due(self, waiting: int, oldest_archived_at: datetime | None, now: datetime) -> bool:
        if waiting >= self.max_events:
            return True
        return waiting > 0 and oldest_archived_at is not None and now - oldest_archived_at >= self.max_age


@dataclass(frozen=True, slots=True)
class ArchivedRow:
    """The columns of `audit.events` a segment and the chain need."""

    seq: int
    event_id: str
    body: str
    prev_hash: str
    hash: str
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """A row of `audit.segments`."""

    segment_no: int
    first_seq: int
    last_seq: int
    events: int
    prev_hash: str
    last_hash: str
    first_at: datetime
    last_at: datetime
    object_key: str
    object_version: str | None
    object_sha256: str
    object_bytes: int
    manifest_key: str
    manifest_version: str | None


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A segment ready to store: the compressed lines, their digest, and the manifest."""

    segment_no: int
    rows: tuple[ArchivedRow, ...]
    object_key: str
    manifest_key: str
    data: bytes
    sha256: str
    manifest: dict[str, object]

    @property
    def manifest_bytes(self) -> bytes:
        return canonical_json(self.manifest)


def segment_keys(archive_id: str, segment_no: int) -> tuple[str, str]:
    """Object keys of a segment and its manifest in the archive bucket."""
    stem = f"segments/{archive_id}/{segment_no:08d}"
    return f"{stem}.jsonl.gz", f"{stem}.manifest.json"


def build_segment(archive_id: str, segment_no: int, rows: Sequence[ArchivedRow]) -> SegmentFile:
    """The segment of `rows` (consecutive, non-empty); deterministic, so a re-roll gives equal bytes."""
    lines = "".join(f"{row.body}\n" for row in rows).encode()
    data = gzip.compress(lines, compresslevel=6, mtime=0)
    digest = hashlib.sha256(data).hexdigest()
    object_key, manifest_key = segment_keys(archive_id, segment_no)
    first, last = rows[0], rows[-1]
    manifest: dict[str, object] = {
        "archive_id": archive_id, "segment_no": segment_no, "format": SEGMENT_FORMAT,
        "first_seq": first.seq, "last_seq": last.seq, "events": len(rows),
        "prev_hash": first.prev_hash, "last_hash": last.hash,
        "first_event_id": first.event_id, "last_event_id": last.event_id,
        "first_at": first.occurred_at, "last_at": last.occurred_at,
        "object_key": object_key, "object_sha256": digest, "object_bytes": len(data),
    }  # fmt: skip
    return SegmentFile(segment_no, tuple(rows), object_key, manifest_key, data, digest, manifest)


# ---- checks (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentProblem:
    """Something about a segment that does not hold; `seq`/`event_id` name the first event it breaks."""

    segment_no: int
    detail: str
    seq: int | None = None
    event_id: str | None = None


def segment_lines(data: bytes) -> list[str]:
    """The event bodies of a segment object (raises ValueError when it is not gzip'd text)."""
    try:
        text = gzip.decompress(data).decode()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot be decompressed: {exc}") from exc
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def check_segment(
    record: SegmentRecord, data: bytes | None, manifest: bytes | None, rows: Sequence[ArchivedRow]
) -> list[SegmentProblem]:
    """What does not hold between the stored object, its manifest, the record and the archive rows."""
    problems = _check_manifest(record, manifest)
    if data is None:
        return [*problems, SegmentProblem(record.segment_no, f"object {record.object_key} is missing from the bucket")]
    digest = hashlib.sha256(data).hexdigest()
    if digest != record.object_sha256:
        problems.append(SegmentProblem(record.segment_no, f"object {record.object_key} changed: sha256 {digest[:12]}…,"
                                       f" recorded {record.object_sha256[:12]}…"))  # fmt: skip
    try:
        lines = segment_lines(data)
    except ValueError as exc:
        return [*problems, SegmentProblem(record.segment_no, f"object {record.object_key} {exc}")]
    return problems + _check_lines(record, lines, rows)


def _check_manifest(record: SegmentRecord, manifest: bytes | None) -> list[SegmentProblem]:
    if manifest is None:
        return [SegmentProblem(record.segment_no, f"manifest {record.manifest_key} is missing from the bucket")]
    try:
        stated = json.loads(manifest)
    except ValueError:
        return [SegmentProblem(record.segment_no, f"manifest {record.manifest_key} is not JSON")]
    expected = {
        "first_seq": record.first_seq, "last_seq": record.last_seq, "events": record.events,
        "prev_hash": record.prev_hash, "last_hash": record.last_hash, "object_sha256": record.object_sha256,
    }  # fmt: skip
    return [
        SegmentProblem(record.segment_no, f"manifest {record.manifest_key} says {name} {stated.get(name)!r},"
                       f" the archive recorded {value!r}")  # fmt: skip
        for name, value in expected.items()
        if stated.get(name) != value
    ]


def _check_lines(record: SegmentRecord, lines: Sequence[str], rows: Sequence[ArchivedRow]) -> list[SegmentProblem]:
    by_seq = {row.seq: row for row in rows}
    prev = record.prev_hash
    for offset, line in enumerate(lines):
        seq = record.first_seq + offset
        row = by_seq.get(seq)
        digest = link(prev, line)
        if row is None:
            return [SegmentProblem(record.segment_no, f"line {offset + 1} has no archived event {seq}", seq)]
        if digest != row.hash:
            return [SegmentProblem(record.segment_no, f"line {offset + 1} (sequence {seq}, event {row.event_id}) differs"
                                   " from the archived event: its hash does not match", seq, row.event_id)]  # fmt: skip
        prev = digest
    if len(lines) != record.events:
        return [SegmentProblem(record.segment_no, f"object holds {len(lines)} events, the manifest {record.events}")]
    return []


# ---- I/O --------------------------------------------------------------------------------------------

_ROW_COLUMNS = "seq, event_id, body, prev_hash, hash, occurred_at"
_SEGMENT_COLUMNS = (
    "segment_no, first_seq, last_seq, events, prev_hash, last_hash, first_at, last_at, object_key,"
    " object_version, object_sha256, object_bytes, manifest_key, manifest_version"
)


async def load_archive_id(conn: asyncpg.Connection | asyncpg.Pool) -> str:
    return await conn.fetchval(f"SELECT archive_id FROM {SCHEMA}.archive WHERE id = 1")


async def load_segments(conn: asyncpg.Connection | asyncpg.Pool) -> list[SegmentRecord]:
    rows = await conn.fetch(f"SELECT {_SEGMENT_COLUMNS} FROM {SCHEMA}.segments ORDER BY segment_no")
    return [SegmentRecord(**dict(row)) for row in rows]


async def load_rows(conn: asyncpg.Connection | asyncpg.Pool, first_seq: int, last_seq: int) -> list[ArchivedRow]:
    rows = await conn.fetch(
        f"SELECT {_ROW_COLUMNS} FROM {SCHEMA}.events WHERE seq BETWEEN $1 AND $2 ORDER BY seq", first_seq, last_seq
    )
    return [ArchivedRow(**dict(row)) for row in rows]


async def roll_due_segments(pool: asyncpg.Pool, store: ObjectStore, policy: SegmentPolicy, now: datetime) -> list[SegmentRecord]:
    """Roll every segment that is due now (see the module docstring); the records written."""
    rolled: list[SegmentRecord] = []
    while True:
        async with pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", ROLL_LOCK):
                return rolled  # another ledger instance is rolling
            record = await _roll_one(conn, store, policy, now)
        if record is None:
            return rolled
        log.info("archive segment rolled", segment=record.segment_no, first_seq=record.first_seq,
                 last_seq=record.last_seq, key=record.object_key)  # fmt: skip
        rolled.append(record)


async def _roll_one(conn: asyncpg.Connection, store: ObjectStore, policy: SegmentPolicy, now: datetime) -> SegmentRecord | None:
    last = await conn.fetchrow(f"SELECT segment_no, last_seq FROM {SCHEMA}.segments ORDER BY segment_no DESC LIMIT 1")
    segment_no, after = (last["segment_no"] + 1, last["last_seq"]) if last else (1, 0)
    waiting = await conn.fetchrow(
        f"SELECT count(*) AS n, min(archived_at) AS oldest FROM"
        f" (SELECT archived_at FROM {SCHEMA}.events WHERE seq > $1 ORDER BY seq LIMIT $2) AS w",
        after, policy.max_events,
    )  # fmt: skip
    if not policy.is_due(waiting["n"], waiting["oldest"], now):
        return None
    rows = await load_rows(conn, after + 1, after + policy.max_events)
    segment = build_segment(await load_archive_id(conn), segment_no, rows)
    object_version = await _create_once(store, segment.object_key, segment.data, "application/gzip")
    manifest_version = await _create_once(store, segment.manifest_key, segment.manifest_bytes, "application/json")
    record = SegmentRecord(
        segment_no, rows[0].seq, rows[-1].seq, len(rows), rows[0].prev_hash, rows[-1].hash, rows[0].occurred_at,
        rows[-1].occurred_at, segment.object_key, object_version, segment.sha256, len(segment.data),
        segment.manifest_key, manifest_version,
    )  # fmt: skip
    await conn.execute(
        f"INSERT INTO {SCHEMA}.segments ({_SEGMENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        *(getattr(record, name.strip()) for name in _SEGMENT_COLUMNS.split(",")),
    )
    return record


async def _create_once(store: ObjectStore, key: str, body: bytes, content_type: str) -> str | None:
    """Create `key`; if a crash left it from an earlier attempt, accept it only when byte-identical."""
    try:
        return (await store.create(ARCHIVE_BUCKET, key, body, content_type=content_type)).version_id
    except ObjectExistsError:
        existing = await store.get(ARCHIVE_BUCKET, key)
        if existing.body != body:
            raise RuntimeError(f"archive object {key} exists with other content; refusing to roll over it") from None
        return existing.version_id


async def read_segment_objects(store: ObjectStore, record: SegmentRecord) -> tuple[bytes | None, bytes | None]:
    """The segment's object and manifest as the bucket holds them now (None when missing)."""
    found: list[bytes | None] = []
    for key in (record.object_key, record.manifest_key):
        try:
            found.append((await store.get(ARCHIVE_BUCKET, key)).body)
        except ObjectNotFoundError:
            found.append(None)
    return found[0], found[1]
