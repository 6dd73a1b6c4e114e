"""Inbox (tracking records): which event ids a consumer has already applied.

`record_consumed` is called in the SAME transaction as the handler's effect. A conflict on
(consumer, event_id) means the effect was already committed by an earlier delivery: the handler
returns quietly and the message is acked. At-least-once delivery + this = exactly-once effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import asyncpg

from shared.delivery.db import quote_schema
from shared.delivery.outbox import require_transaction


async def record_consumed(conn: asyncpg.Connection, schema: str, consumer: str, event_id: str) -> bool:
    """Record that `consumer` applied `event_id`; False if it had already been recorded."""
    require_transaction(conn)
    inserted = await conn.fetchval(
        f"INSERT INTO {quote_schema(schema)}.inbox (consumer, event_id) VALUES ($1, $2)"
        " ON CONFLICT DO NOTHING RETURNING true",
        consumer,
        event_id,
    )
    return bool(inserted)


async def record_consumed_many(
    conn: asyncpg.Connection, schema: str, consumer: str, event_ids: Sequence[str]
) -> set[str]:
    """Batch form of `record_consumed`: the ids recorded now (the others were already done)."""
    require_transaction(conn)
    rows = await conn.fetch(
        f"INSERT INTO {quote_schema(schema)}.inbox (consumer, event_id)"
        " SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING RETURNING event_id",
        consumer,
        list(event_ids),
    )
    return {row["event_id"] for row in rows}


async def prune_inbox(conn: asyncpg.Connection | asyncpg.Pool, schema: str, older_than: timedelta) -> int:
    """Forget ids consumed more than `older_than` ago (keep it far above the redelivery window)."""
    status = await conn.execute(
        f"DELETE FROM {quote_schema(schema)}.inbox WHERE consumed_at < now() - $1::interval",
        older_than,
    )
    return int(status.split()[-1])
