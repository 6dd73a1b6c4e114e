"""The intake service: reads `cf:ingest` (and each configured upstream's `cf:ingest:<name>`) in
batches and turns each entry into intake events, with actor `upstream:<name>` from the stream
(`services.intake.ingest.IngestSource`; never from the entry).

Per batch (one PostgreSQL transaction):

1. record the entries' ids in the inbox (`ingest:<entry id>` on `cf:ingest`,
   `ingest:<name>:<entry id>` on `cf:ingest:<name>`); a redelivered entry is skipped;
2. `task.submit` -> `submit_many` (task.submitted / task.rejected), `task.cancel` ->
   `cancel_many` (task.cancel_requested), `data.ready` -> `signal_data_ready_many`;
3. a rejected submission or a cancel of an unknown task gets a copy in `cf:deadletter` with the
   reason, written BEFORE the commit: a crash in between may leave a duplicate copy, never none;
4. commit; the delivery consumer then acks the batch.

Entries that cannot be read at all (unknown `type`, `payload` not JSON, ...) never reach the
handler: the consumer dead-letters them at once with `IngestEntryError`'s message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import Emitter, ServiceContext, ServiceSpec
from services.intake.commands import (
    CancelRequest,
    DataReadySignal,
    cancel_many,
    signal_data_ready_many,
    submit_many,
)
from services.intake.ingest import CancelPayload, DataReadyPayload, IngestEntry, IngestKind, IngestSource, ingest_sources
from services.intake.screening import SubmitRequest
from shared.delivery.consumer import reliable_batch_subscriber
from shared.delivery.deadletter import DeadLetterSource, DeadReason, deadletter_fields
from shared.delivery.inbox import record_consumed_many
from shared.logging import get_logger
from shared.names import DEADLETTER_STREAM, INTAKE_GROUP
from shared.submission import Problem, describe

MIGRATIONS = Path(__file__).parent / "sql"
INBOX_CONSUMER = "ingest"
"""Inbox consumer name under which intake records the `cf:ingest*` entries it applied."""

BATCH_SIZE = 200

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DeadCopy:
    """An entry intake processed but could not honour, to be copied to `cf:deadletter`."""

    entry: IngestEntry
    error: str


async def setup(ctx: ServiceContext) -> None:
    consumer = f"intake-{ctx.instance}"
    for source in ingest_sources(ctx.settings.ingest_upstreams, ctx.settings.ingest_default_upstream):
        subscribe_ingest(ctx, consumer, source)


def subscribe_ingest(ctx: ServiceContext, consumer: str, source: IngestSource) -> None:
    """Read one ingest stream in intake's group; its entries are recorded as `source.actor`."""

    @reliable_batch_subscriber(
        ctx.broker,
        stream=source.stream,
        group=INTAKE_GROUP,
        parse=source.parse,
        parse_entry=True,
        consumer=consumer,
        max_records=BATCH_SIZE,
    )
    async def on_ingest(entries: list[IngestEntry]) -> None:
        await handle_ingest_batch(ctx, consumer, entries)


SPEC = ServiceSpec(name="intake", schema="intake", migrations=MIGRATIONS, setup=setup)


async def handle_ingest_batch(ctx: ServiceContext, consumer: str, entries: Sequence[IngestEntry]) -> None:
    """Apply a batch of readable entries exactly once (see module docstring)."""
    async with ctx.transaction() as conn:
        fresh_ids = await record_consumed_many(conn, ctx.schema, INBOX_CONSUMER, [e.event_id for e in entries])
        fresh = [entry for entry in entries if entry.event_id in fresh_ids]
        copies = await apply_entries(conn, ctx.emitter, fresh)
        await write_dead_copies(ctx.redis, consumer, copies)


async def apply_entries(conn: asyncpg.Connection, emitter: Emitter, entries: Sequence[IngestEntry]) -> list[DeadCopy]:
    """Submissions first, then cancellations, then data signals; return the entries to dead-letter."""
    submits = [e for e in entries if e.kind is IngestKind.SUBMIT]
    cancels = [e for e in entries if e.kind is IngestKind.CANCEL]
    readies = [e for e in entries if e.kind is IngestKind.DATA_READY]
    copies: list[DeadCopy] = []
    if submits:
        outcomes = await submit_many(conn, emitter, [SubmitRequest(e.payload, e.actor, e.source) for e in submits])
        copies += [DeadCopy(e, rejection_text(o.task_id, o.problems)) for e, o in zip(submits, outcomes) if o.problems]
    if cancels:
        known = await cancel_many(conn, emitter, [_cancel_request(e) for e in cancels])
        copies += [DeadCopy(e, unknown_task_text(e.payload)) for e, ok in zip(cancels, known) if not ok]
    if readies:
        await signal_data_ready_many(conn, emitter, [DataReadySignal(_ready_payload(e), e.actor) for e in readies])
    return copies


def rejection_text(task_id: str, problems: Sequence[Problem]) -> str:
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    return f"task.submit rejected as task {task_id} (see its task.rejected event), {count}:\n{describe(problems)}"


def unknown_task_text(payload: CancelPayload) -> str:
    return f"task.cancel: payload.task_id {payload.task_id!r} names no task intake knows; nothing to cancel"


async def write_dead_copies(redis: Redis, consumer: str, copies: Sequence[DeadCopy]) -> None:
    """XADD one dead-letter entry per copy (the original is acked with its batch, not here)."""
    if not copies:
        return
    async with redis.pipeline(transaction=True) as pipe:
        for copy in copies:
            source = DeadLetterSource(copy.entry.stream, INTAKE_GROUP, consumer, copy.entry.entry_id)
            pipe.xadd(DEADLETTER_STREAM, deadletter_fields(source, copy.entry.fields, DeadReason.INVALID, 1, copy.error))
        await pipe.execute()
    for copy in copies:
        log.warning("ingest entry not honoured; copy dead-lettered", entry_id=copy.entry.entry_id, error=copy.error)


def _cancel_request(entry: IngestEntry) -> CancelRequest:
    payload: CancelPayload = entry.payload
    return CancelRequest(payload.task_id, entry.actor, payload.reason)


def _ready_payload(entry: IngestEntry) -> DataReadyPayload:
    return entry.payload
