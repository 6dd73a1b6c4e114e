"""Transactional outbox: events are inserted in the caller's transaction, next to its table changes.

A handler updates its tables and calls `append_events` on the SAME connection inside the SAME
transaction; both commit or neither does. A NOTIFY (delivered at commit; sent by the same
statement as the insert, one round trip for both) wakes the relay, which
publishes the rows to Redis (see `shared.delivery.relay`). `next_subject_seq` hands out the
per-subject, gap-free `subject_seq` under the same transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from shared.delivery.db import quote_schema
from shared.events.envelope import Envelope, canonical_json
from shared.names import EVENTS_STREAM


class NotInTransactionError(RuntimeError):
    """Outbox and inbox writes must share the caller's transaction; there was none."""


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel that wakes the relay of `schema`."""
    quote_schema(schema)
    return f"cardflow_outbox_{schema}"


def require_transaction(conn: asyncpg.Connection) -> None:
    if not conn.is_in_transaction():
        raise NotInTransactionError("call this inside `async with conn.transaction():` with the effect's writes")


async def append_events(
    conn: asyncpg.Connection, schema: str, events: Sequence[Envelope], *, stream: str = EVENTS_STREAM
) -> None:
    """Insert `events` into `schema`.outbox for publication to `stream`, in the caller's transaction.

    Rows are published in insertion order. Call `next_subject_seq` before building an event so
    that, per subject, sequence order and outbox order agree.
    """
    require_transaction(conn)
    if not events:
        return
    await conn.execute(
        f"WITH appended AS (INSERT INTO {quote_schema(schema)}.outbox (event_id, type, subject, stream, body)"
        " SELECT e.event_id, e.type, e.subject, $5, e.body"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY"
        " AS e(event_id, type, subject, body, ord) ORDER BY e.ord) SELECT pg_notify($6, '')",
        [e.event_id for e in events],
        [e.type for e in events],
        [e.subject for e in events],
        [canonical_json(e).decode() for e in events],
        stream,
        notify_channel(schema),
    )


async def append_routed(conn: asyncpg.Connection, schema: str, routed: Sequence[tuple[Envelope, str]]) -> None:
    """`append_events` for `(event, stream)` pairs bound to different streams, in ONE insert.

    The dispatcher's grants go to many agent inboxes at once (`cf:agent:<id>`); one statement
    instead of one per inbox. Rows are published in the order given.
    """
    await _insert_rows(conn, schema, [(e, stream, canonical_json(e).decode()) for e, stream in routed])


_SEQ_MARK = ',"subject_seq":1,"type":'  # canonical JSON sorts the envelope's keys: `subject_seq` comes just before `type`


@dataclass(frozen=True, slots=True)
class UnnumberedEvent:
    """An event built, and written as canonical JSON, before its `subject_seq` is known (built with 1;
    `body(seq)` is its JSON with the real number; the envelope object keeps 1), and the stream it goes to.

    Building (pydantic validation, the event id, the JSON) is most of what appending an event costs;
    this way a caller can do it while PostgreSQL works on its other statements."""

    event: Envelope
    stream: str
    body_head: str  # canonical JSON up to the subject_seq's digits
    body_tail: str  # from the comma after them

    @classmethod
    def of(cls, event: Envelope, stream: str) -> UnnumberedEvent:
        head, mark, tail = canonical_json(event).decode().rpartition(_SEQ_MARK)
        if event.subject_seq != 1 or not mark:
            raise ValueError(f"{event.type}: not an unnumbered envelope (subject_seq 1 just before type)")
        return cls(event, stream, head + ',"subject_seq":', ',"type":' + tail)

    def body(self, subject_seq: int) -> str:
        """The canonical JSON of this event numbered `subject_seq` (the envelope itself is not copied:
        pydantic's `model_copy` costs more than building the JSON did)."""
        return f"{self.body_head}{subject_seq}{self.body_tail}"


async def append_numbered(conn: asyncpg.Connection, schema: str, events: Sequence[UnnumberedEvent],
                          subject_seqs: Sequence[int]) -> None:
    """`append_routed` for events built before they were numbered (`next_subject_seqs` gave `subject_seqs`,
    one per event, in order): ONE insert."""
    rows = [(event.event, event.stream, event.body(seq)) for event, seq in zip(events, subject_seqs, strict=True)]
    await _insert_rows(conn, schema, rows)


async def _insert_rows(conn: asyncpg.Connection, schema: str, rows: Sequence[tuple[Envelope, str, str]]) -> None:
    """Insert (event, stream, body) rows into the outbox in order, with the NOTIFY that wakes the relay."""
    require_transaction(conn)
    if not rows:
        return
    await conn.execute(
        f"WITH appended AS (INSERT INTO {quote_schema(schema)}.outbox (event_id, type, subject, stream, body)"
        " SELECT e.event_id, e.type, e.subject, e.stream, e.body"
        " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY"
        " AS e(event_id, type, subject, stream, body, ord) ORDER BY e.ord) SELECT pg_notify($6, '')",
        [e.event_id for e, _, _ in rows],
        [e.type for e, _, _ in rows],
        [e.subject for e, _, _ in rows],
        [stream for _, stream, _ in rows],
        [body for _, _, body in rows],
        notify_channel(schema),
    )


async def next_subject_seq(conn: asyncpg.Connection, schema: str, subject: str) -> int:
    """The next `subject_seq` of `subject` (1, 2, 3, …), gap-free and transactional.

    The upsert row-locks the subject until the caller commits, so concurrent writers of one
    subject queue behind each other, and a rolled-back transaction gives its number back.
    """
    require_transaction(conn)
    return await conn.fetchval(
        f"INSERT INTO {quote_schema(schema)}.subject_seq AS s (subject, last_seq) VALUES ($1, 1)"
        " ON CONFLICT (subject) DO UPDATE SET last_seq = s.last_seq + 1 RETURNING last_seq",
        subject,
    )


async def next_subject_seqs(conn: asyncpg.Connection, schema: str, subjects: Sequence[str]) -> list[int]:
    """Batch form of `next_subject_seq`: one number per item of `subjects`, in order.

    One statement for the whole batch; a subject named n times gets n consecutive numbers.
    Subjects are locked in sorted order, so concurrent batches cannot deadlock on each other.
    """
    require_transaction(conn)
    counts = Counter(subjects)
    rows = await conn.fetch(
        f"INSERT INTO {quote_schema(schema)}.subject_seq AS s (subject, last_seq)"
        " SELECT subject, n FROM unnest($1::text[], $2::bigint[]) AS t(subject, n) ORDER BY subject"
        " ON CONFLICT (subject) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq"
        " RETURNING subject, last_seq",
        list(counts),
        list(counts.values()),
    )
    following = {row["subject"]: row["last_seq"] - counts[row["subject"]] for row in rows}
    seqs: list[int] = []
    for subject in subjects:
        following[subject] += 1
        seqs.append(following[subject])
    return seqs


async def prune_outbox(conn: asyncpg.Connection | asyncpg.Pool, schema: str, older_than: timedelta) -> int:
    """Delete rows published more than `older_than` ago; return how many were deleted."""
    status = await conn.execute(
        f"DELETE FROM {quote_schema(schema)}.outbox"
        " WHERE published_at IS NOT NULL AND published_at < now() - $1::interval",
        older_than,
    )
    return int(status.split()[-1])
