"""Retention: streams trimmed once every consumer group is past an entry, outboxes and inboxes
pruned after a window — so nothing grows without bound and nothing unread is ever dropped.

Streams (`trim_stream`): an entry may go once (1) it is older than `RetentionPolicy.stream_keep`
(`routed_keep` on a routed stream, whose entries are copies of `cf:events` entries) and (2) EVERY consumer group of the stream is past it: delivered (`last-delivered-id`) and not
pending (XPENDING's oldest id). The trim point is the smallest of those ids (`safe_trim_id`,
pure); XTRIM MINID removes only entries strictly below it. A stream without consumer groups is
never trimmed (nobody has read it), nor is `cf:deadletter` (operators read it by hand).

Outboxes (`prune_trimmed_outbox`): a published row may go once it is older than `outbox_keep`
AND its stream entry is gone from the stream — which, by the rule above, means every group of
that stream read it, the audit archive's among them. Inboxes (`prune_inbox`): consumed ids are
kept for `inbox_keep`, far longer than any redelivery by a claimer; replaying a dead letter older
than that could apply it a second time in groups that had applied it (see docs/delivery.md).

`sweep(pool, redis, schema)` does all three for one service (every service runs it hourly,
`services.common.runtime`); `stream_retention_report` is what `cardflow doctor` shows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ResponseError

from shared.delivery.db import quote_schema
from shared.delivery.inbox import prune_inbox
from shared.logging import get_logger
from shared.names import DEADLETTER_STREAM, EVENTS_STREAM, is_routed_stream, producer_stream

log = get_logger(__name__)

StreamId = tuple[int, int]
STREAM_PATTERN = "cf:*"


@dataclass(frozen=True)
class RetentionPolicy:
    """How long what is read stays (the policy's `retention` section once config lands)."""

    stream_keep: timedelta = timedelta(hours=24)
    routed_keep: timedelta = timedelta(hours=1)
    """A routed stream's (`cf:routed:<group>`) entries are copies of `cf:events` entries, which keep
    `stream_keep`: once its one group read them they need not stay long."""
    outbox_keep: timedelta = timedelta(days=7)
    inbox_keep: timedelta = timedelta(days=7)
    sweep_every: timedelta = timedelta(hours=1)


DEFAULT_RETENTION = RetentionPolicy()


@dataclass(frozen=True)
class GroupProgress:
    """How far one consumer group has read a stream."""

    name: str
    last_delivered: str
    oldest_pending: str | None


@dataclass(frozen=True)
class StreamRetention:
    """One stream as retention sees it (for `cardflow doctor`)."""

    stream: str
    length: int
    groups: int
    oldest_entry: str | None
    trim_point: str | None  # entries below it may go now; None: nothing may go
    trimmed: int = 0


def parse_id(entry_id: str) -> StreamId:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def safe_trim_id(groups: Sequence[GroupProgress], now_ms: int, keep_ms: int) -> str | None:
    """The MINID below which every entry is read by every group and older than `keep_ms` (pure).

    None when there is no group (nobody read anything) or nothing qualifies."""
    if not groups:
        return None
    bounds = [parse_id(g.oldest_pending or g.last_delivered) for g in groups]
    bounds.append((max(0, now_ms - keep_ms), 0))
    ms, seq = min(bounds)
    return None if (ms, seq) == (0, 0) else f"{ms}-{seq}"


async def group_progress(redis: Redis, stream: str) -> list[GroupProgress]:
    """Every consumer group of `stream` with its last delivered and oldest pending id."""
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError:
        return []  # no such stream
    progress = []
    for group in groups:
        name = _text(group["name"])
        pending = await redis.xpending(stream, name)
        oldest = _text(pending["min"]) if pending["pending"] else None
        progress.append(GroupProgress(name, _text(group["last-delivered-id"]), oldest))
    return progress


def kept_for(stream: str, policy: RetentionPolicy = DEFAULT_RETENTION) -> timedelta:
    """How long `stream`'s entries stay after every group read them."""
    return policy.routed_keep if is_routed_stream(stream) else policy.stream_keep


async def trim_stream(redis: Redis, stream: str, policy: RetentionPolicy = DEFAULT_RETENTION) -> StreamRetention:
    """Trim `stream` up to its safe point (see the module docstring); what it holds afterwards."""
    groups = await group_progress(redis, stream)
    point = None if stream == DEADLETTER_STREAM else safe_trim_id(groups, _now_ms(), _ms(kept_for(stream, policy)))
    trimmed = int(await redis.xtrim(stream, minid=point, approximate=False)) if point else 0
    first = await redis.xrange(stream, count=1)
    return StreamRetention(
        stream=stream, length=int(await redis.xlen(stream)), groups=len(groups),
        oldest_entry=_text(first[0][0]) if first else None, trim_point=point, trimmed=trimmed,
    )  # fmt: skip


async def cardflow_streams(redis: Redis, patterns: Sequence[str] = (STREAM_PATTERN,)) -> list[str]:
    """Every stream key matching `patterns` (default `cf:*`: every stream, agents' inboxes included)."""
    names = {_text(key) for pattern in patterns async for key in redis.scan_iter(match=pattern, _type="stream")}
    return sorted(names)


async def prune_trimmed_outbox(conn: asyncpg.Connection | asyncpg.Pool, redis: Redis, schema: str, older_than: timedelta) -> int:
    """Delete published outbox rows older than `older_than` whose entry is no longer in its stream.

    Rows bound for `cf:events` were appended to the schema's own stream (the relay's `cf:events:<schema>`);
    that entry leaves it once the gate forwarded it to `cf:events`, where it stays until every group read it."""
    firsts: dict[str, str] = {}
    for row in await conn.fetch(f"SELECT DISTINCT stream FROM {quote_schema(schema)}.outbox WHERE published_at IS NOT NULL"):
        written_to = producer_stream(schema) if row["stream"] == EVENTS_STREAM else row["stream"]
        first = await redis.xrange(written_to, count=1)
        firsts[row["stream"]] = _text(first[0][0]) if first else "18446744073709551615-0"  # empty: all trimmed
    deleted = 0
    for stream, first_id in firsts.items():
        status = await conn.execute(
            f"DELETE FROM {quote_schema(schema)}.outbox WHERE stream = $1 AND published_at IS NOT NULL"
            " AND published_at < now() - $2::interval AND entry_id IS NOT NULL"
            " AND (split_part(entry_id, '-', 1)::numeric, split_part(entry_id, '-', 2)::numeric)"
            "     < (split_part($3, '-', 1)::numeric, split_part($3, '-', 2)::numeric)",
            stream, older_than, first_id,
        )  # fmt: skip
        deleted += int(status.split()[-1])
    return deleted


async def sweep(pool: asyncpg.Pool, redis: Redis, schema: str | None, policy: RetentionPolicy = DEFAULT_RETENTION,
                streams: Sequence[str] = (STREAM_PATTERN,)) -> dict[str, int]:  # fmt: skip
    """Trim the streams matching `streams` to their safe points, then prune this schema's outbox and inbox.

    With a Redis user per service (shared.redis_acl) each service trims the streams it reads
    (`shared.redis_acl.trimmed_streams`); every stream has a reader, so all are trimmed."""
    trimmed = 0
    for stream in await cardflow_streams(redis, streams):
        try:
            trimmed += (await trim_stream(redis, stream, policy)).trimmed
        except NoPermissionError:  # a Redis whose users differ from shared.redis_acl's: leave it to them
            log.warning("retention may not trim this stream", stream=stream)
    done = {"stream_entries": trimmed, "outbox_rows": 0, "inbox_rows": 0}
    if schema is not None:
        done["outbox_rows"] = await prune_trimmed_outbox(pool, redis, schema, policy.outbox_keep)
        done["inbox_rows"] = await prune_inbox(pool, schema, policy.inbox_keep)
    if any(done.values()):
        log.info("retention sweep", schema=schema, **done)
    return done


async def stream_retention_report(redis: Redis) -> list[StreamRetention]:
    """Each `cf:*` stream's length, groups, oldest entry and current trim point (trims nothing)."""
    report = []
    for stream in await cardflow_streams(redis):
        groups = await group_progress(redis, stream)
        first = await redis.xrange(stream, count=1)
        point = None if stream == DEADLETTER_STREAM else safe_trim_id(groups, _now_ms(), _ms(kept_for(stream)))
        report.append(StreamRetention(stream, int(await redis.xlen(stream)), len(groups), _text(first[0][0]) if first else None, point))
    return report


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class SchemaRetention:
    """One schema's outbox and inbox sizes (for `cardflow doctor`)."""

    schema: str
    outbox_rows: int
    outbox_unpublished: int
    inbox_rows: int


async def schema_retention_report(conn: asyncpg.Connection | asyncpg.Pool) -> list[SchemaRetention]:
    """Every schema with an outbox: its rows (and how many are not published yet) and inbox rows."""
    schemas = await conn.fetch(
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'outbox' ORDER BY table_schema"
    )
    report = []
    for row in schemas:
        quoted = quote_schema(row["table_schema"])
        outbox = await conn.fetchrow(f"SELECT count(*) AS n, count(*) FILTER (WHERE published_at IS NULL) AS u FROM {quoted}.outbox")
        inbox = await conn.fetchval(f"SELECT count(*) FROM {quoted}.inbox")
        report.append(SchemaRetention(row["table_schema"], outbox["n"], outbox["u"], inbox))
    return report
