"""Rows and deliveries per task in one pipeline phase: what each task costs the transport, counted.

`bench/pipeline.py --deliveries` takes a `DeliverySnapshot` before and after a phase and prints:

- events per task by type (the phase's entries on `cf:events`, read back by their wire `type` field);
- deliveries per task by stream and consumer group (the growth of each group's `entries-read`,
  Redis >= 7 / Valkey; agent inboxes summed as `cf:agent:*`): every group on a stream receives every
  entry, whether its service folds the entry's type or skips it unparsed;
- rows per task in each schema's outbox and inbox (the growth of their row counts; the hourly
  retention sweep does not run within a phase);
- appends per task by stream (the growth of each stream's `entries-added`, Redis >= 7 / Valkey): what
  the relays, the gate (`cf:events` and the routed streams `cf:routed:*`) and the agents wrote.

The counts include whatever else the system did in the window (lease renewals, node heartbeats'
events, rounds): they are the cost of the phase, divided by its tasks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import asyncpg
from redis.asyncio import Redis
from rich.console import Console
from rich.table import Table

from shared.names import EVENTS_STREAM, SCHEMAS

AGENT_INBOXES = "cf:agent:*"


@dataclass(frozen=True)
class DeliverySnapshot:
    """Counters at one moment: entries read per (stream, group), rows per (schema, table)."""

    entries_read: dict[tuple[str, str], int]
    rows: dict[tuple[str, str], int]
    last_event_id: str
    appended: dict[str, int] = field(default_factory=dict)  # stream -> entries ever added


@dataclass(frozen=True)
class DeliveryCounts:
    """One phase's counts per task."""

    tasks: int
    events: dict[str, float]  # type -> events per task
    deliveries: dict[tuple[str, str], float]  # (stream, group) -> deliveries per task
    rows: dict[tuple[str, str], float]  # (schema, outbox|inbox) -> rows per task
    groups_per_event: dict[str, int] = field(default_factory=dict)  # stream -> consumer groups on it
    appends: dict[str, float] = field(default_factory=dict)  # stream -> entries appended per task


async def take_snapshot(redis: Redis, pool: asyncpg.Pool) -> DeliverySnapshot:
    """Every stream's groups' `entries-read`, and every schema's outbox and inbox row counts."""
    entries_read: Counter[tuple[str, str]] = Counter()
    appended: Counter[str] = Counter()
    async for key in redis.scan_iter(match="cf:*", _type="STREAM"):
        stream = key.decode()
        name = AGENT_INBOXES if stream.startswith("cf:agent:") else stream
        appended[name] += int((await redis.xinfo_stream(stream)).get("entries-added") or 0)
        for group in await redis.xinfo_groups(stream):
            entries_read[(name, group["name"].decode())] += int(group.get("entries-read") or 0)
    rows = {(schema, table): await _count(pool, schema, table) for schema in SCHEMAS for table in ("outbox", "inbox")}
    last = await redis.xrevrange(EVENTS_STREAM, count=1)
    return DeliverySnapshot(dict(entries_read), rows, last[0][0].decode() if last else "0-0", dict(appended))


async def _count(pool: asyncpg.Pool, schema: str, table: str) -> int:
    try:
        return int(await pool.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))
    except asyncpg.UndefinedTableError:
        return 0


async def phase_counts(redis: Redis, before: DeliverySnapshot, after: DeliverySnapshot, tasks: int) -> DeliveryCounts:
    """Per-task growth between `before` and `after`, and the phase's events by type."""
    return counts_per_task(before, after, await _event_types(redis, before.last_event_id, after.last_event_id), tasks)


def counts_per_task(before: DeliverySnapshot, after: DeliverySnapshot, types: Counter[str], tasks: int) -> DeliveryCounts:
    """What grew between `before` and `after` (and the phase's events `types`), per task; counters that did
    not grow are left out."""
    per = max(tasks, 1)
    deliveries = {key: (n - before.entries_read.get(key, 0)) / per for key, n in after.entries_read.items()}
    rows = {key: (n - before.rows.get(key, 0)) / per for key, n in after.rows.items()}
    appends = {stream: (n - before.appended.get(stream, 0)) / per for stream, n in after.appended.items()}
    groups = Counter(stream for stream, _ in after.entries_read)
    return DeliveryCounts(tasks, {t: n / per for t, n in types.items()}, {k: v for k, v in deliveries.items() if v},
                          {k: v for k, v in rows.items() if v}, dict(groups), {k: v for k, v in appends.items() if v})  # fmt: skip


async def _event_types(redis: Redis, after_id: str, until_id: str) -> Counter[str]:
    types: Counter[str] = Counter()
    start = f"({after_id}"
    while True:
        entries = await redis.xrange(EVENTS_STREAM, min=start, max=until_id, count=5_000)
        for entry_id, fields in entries:
            types[fields.get(b"type", b"?").decode()] += 1
        if len(entries) < 5_000:
            return types
        start = f"({entries[-1][0].decode()}"


def print_delivery_counts(console: Console, counts: DeliveryCounts) -> None:
    """Four tables: events by type, deliveries by stream and group, appends by stream, outbox/inbox rows by schema."""
    events = Table(title=f"events per task by type ({counts.tasks} tasks)")
    events.add_column("type")
    events.add_column("per task", justify="right")
    for event_type, n in sorted(counts.events.items(), key=lambda item: -item[1]):
        events.add_row(event_type, f"{n:.2f}")
    events.add_row("all", f"{sum(counts.events.values()):.2f}")
    deliveries = Table(title="deliveries per task by stream and consumer group")
    for column in ("stream", "group", "per task"):
        deliveries.add_column(column, justify="right" if column == "per task" else "left")
    for (stream, group), n in sorted(counts.deliveries.items(), key=lambda item: (item[0][0], -item[1])):
        deliveries.add_row(stream, group, f"{n:.2f}")
    deliveries.add_row("all", "", f"{sum(counts.deliveries.values()):.2f}")
    appends = Table(title="appends per task by stream")
    for column in ("stream", "per task"):
        appends.add_column(column, justify="right" if column == "per task" else "left")
    for stream, n in sorted(counts.appends.items()):
        appends.add_row(stream, f"{n:.2f}")
    appends.add_row("all", f"{sum(counts.appends.values()):.2f}")
    rows = Table(title="outbox and inbox rows per task by schema")
    for column in ("schema", "table", "per task"):
        rows.add_column(column, justify="right" if column == "per task" else "left")
    for (schema, table), n in sorted(counts.rows.items()):
        rows.add_row(schema, table, f"{n:.2f}")
    rows.add_row("all", "", f"{sum(counts.rows.values()):.2f}")
    for table in (events, deliveries, appends, rows):
        console.print(table)


def delivery_counts_json(counts: DeliveryCounts) -> dict[str, object]:
    """`counts` as plain JSON."""
    return {
        "tasks": counts.tasks, "events_per_task": counts.events,
        "deliveries_per_task": {f"{stream} {group}": n for (stream, group), n in counts.deliveries.items()},
        "rows_per_task": {f"{schema}.{table}": n for (schema, table), n in counts.rows.items()},
        "appends_per_task": counts.appends,
    }  # fmt: skip
