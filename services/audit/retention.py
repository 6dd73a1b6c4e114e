"""What may be deleted once it is archived: outbox rows, and `cf:events` entries (markers for the
retention jobs; the jobs themselves belong to whoever runs retention).

- `prune_archived_outbox(conn, schema, older_than)`: delete a service's published outbox rows older
  than `older_than` whose events are in `audit.events` (rows for other streams, e.g. agent
  commands, are never archived and go by age alone). An event the archiver has not taken yet stays.
- `archived_stream_through(redis)`: the `cf:events` entry id up to which (inclusive) every entry
  has been archived (acknowledged by the archiver's group `audit`, which acks only after its
  transaction committed, or dead-lettered as unparseable); XTRIM MINID may cut strictly below it.
  None while the archiver has not read anything.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
from redis.asyncio import Redis

from shared.delivery.db import quote_schema
from shared.names import AUDIT_GROUP, EVENTS_STREAM


async def prune_archived_outbox(conn: asyncpg.Connection | asyncpg.Pool, schema: str, older_than: timedelta) -> int:
    """Delete published rows of `schema`'s outbox older than `older_than` that are archived; how many."""
    status = await conn.execute(
        f"DELETE FROM {quote_schema(schema)}.outbox AS o"
        " WHERE o.published_at IS NOT NULL AND o.published_at < now() - $1::interval"
        " AND (o.stream <> $2 OR EXISTS (SELECT 1 FROM audit.events a WHERE a.event_id = o.event_id))",
        older_than, EVENTS_STREAM,
    )  # fmt: skip
    return int(status.split()[-1])


async def archived_stream_through(redis: Redis, stream: str = EVENTS_STREAM) -> str | None:
    """The last entry id of `stream` below which nothing is left for the archiver (see the docstring)."""
    groups = {g["name"].decode() if isinstance(g["name"], bytes) else g["name"]: g
              for g in await redis.xinfo_groups(stream)}  # fmt: skip
    group = groups.get(AUDIT_GROUP)
    if group is None:
        return None
    last = group["last-delivered-id"]
    last = last.decode() if isinstance(last, bytes) else last
    if last == "0-0":
        return None
    pending = await redis.xpending(stream, AUDIT_GROUP)
    if not pending["pending"]:
        return last
    lowest = pending["min"].decode() if isinstance(pending["min"], bytes) else pending["min"]
    return _before(lowest)


def _before(entry_id: str) -> str | None:
    """The greatest possible entry id strictly below `entry_id`."""
    millis, sequence = (int(part) for part in entry_id.split("-"))
    if sequence > 0:
        return f"{millis}-{sequence - 1}"
    return f"{millis - 1}-18446744073709551615" if millis > 0 else None
