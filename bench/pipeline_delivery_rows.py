"""CPU per row of the delivery tables' writes, measured alone: an inbox row, an outbox row's append, and
the relay's mark-published `UPDATE` (as it is, against a layout whose update can be HOT, and against
deleting the row).

    python bench/pipeline_delivery_rows.py --rows 30000 --rounds 3

Starts an embedded PostgreSQL in a scratch dir (nothing else runs), and per round, in alternating
order of the variants, writes `--rows` rows in batches of `--batch` (a transaction each) into fresh
scratch tables shaped like `shared/delivery/sql/001_outbox_inbox.sql`. Event bodies are real
canonical JSON of the pipeline's event types (`--body-events`). It prints the CPU per row of the
PostgreSQL backend serving the connection (`/proc/<pid>/stat`, summed over the whole phase) and
of this client, and the share of updates PostgreSQL made HOT (`pg_stat_user_tables`).

Variants of the relay's step (each after the same append):

- `update (001)`: `UPDATE ... SET published_at, entry_id` with both partial indexes on `published_at`
  (the pending one and the retention one): every update writes a new row version and index entries;
- `update, HOT-able`: the same table without either partial index and with `fillfactor = 50` (room on
  the page), so the update may be HOT; finding pending rows would then need another way (not measured);
- `delete`: `DELETE` of the published rows (what "delete relayed rows" would cost; retention and
  `audit verify` read those rows today).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throwaway_postgres import run_on_embedded_postgres  # noqa: E402
from shared.events import new_event_id  # noqa: E402
from shared.events.envelope import canonical_json  # noqa: E402
from tests.unit.ledger.builders import T0, granted, matched, released, renewed, submitted, succeeded  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
OUTBOX = (
    "CREATE TABLE scratch.outbox (position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id text NOT NULL"
    " UNIQUE, type text NOT NULL, subject text NOT NULL, stream text NOT NULL, body text NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz, entry_id text){with_}"
)
PARTIAL_INDEXES = (
    "CREATE INDEX ON scratch.outbox (position) WHERE published_at IS NULL",
    "CREATE INDEX ON scratch.outbox (published_at) WHERE published_at IS NOT NULL",
)
APPEND = (
    "INSERT INTO scratch.outbox (event_id, type, subject, stream, body) SELECT e.event_id, e.type, e.subject, 'cf:events',"
    " e.body FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS e(event_id, type, subject,"
    " body, ord) ORDER BY e.ord RETURNING position"
)
MARK = (
    "UPDATE scratch.outbox AS o SET published_at = now(), entry_id = m.entry_id"
    " FROM unnest($1::bigint[], $2::text[]) AS m(position, entry_id) WHERE o.position = m.position"
)
DELETE = "DELETE FROM scratch.outbox WHERE position = ANY($1::bigint[])"
INBOX = (
    "CREATE TABLE scratch.inbox (consumer text NOT NULL, event_id text NOT NULL, consumed_at timestamptz NOT NULL"
    " DEFAULT now(), PRIMARY KEY (consumer, event_id)); CREATE INDEX ON scratch.inbox (consumed_at)"
)
RECORD = "INSERT INTO scratch.inbox (consumer, event_id) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING RETURNING event_id"
VARIANTS = ("update (001)", "update, HOT-able", "delete")


def backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def sample_bodies() -> list[tuple[str, str, str]]:
    """(type, subject, body) of real events, one of each type the pipeline emits most."""
    ended = T0.replace(minute=5)
    events = [submitted("T1"), matched("T1", "H100", seq=1), granted("L1", "T1"), renewed("L1", "T1", at=ended),
              succeeded("T1", "L1", 7), released("L1", "T1", ended_at=ended)]  # fmt: skip
    return [(e.type, e.subject, canonical_json(e).decode()) for e in events]


class Meter:
    """Server and client CPU of the phases of one variant, summed over its batches."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.spent: dict[str, list[float]] = {}

    async def timed(self, phase: str, work: Awaitable[Any]) -> Any:
        server, client = backend_cpu_s(self.pid), time.process_time()
        result = await work
        spent = self.spent.setdefault(phase, [0.0, 0.0])
        spent[0] += backend_cpu_s(self.pid) - server
        spent[1] += time.process_time() - client
        return result


async def outbox_round(conn: asyncpg.Connection, pid: int, variant: str, rows: int, batch: int,
                       bodies: Sequence[tuple[str, str, str]]) -> tuple[dict[str, list[float]], float]:  # fmt: skip
    """Append `rows` rows and publish them (the variant's step), batch by batch; (CPU by phase, HOT share)."""
    await conn.execute("DROP TABLE IF EXISTS scratch.outbox")
    await conn.execute(OUTBOX.format(with_=" WITH (fillfactor = 50)" if variant == "update, HOT-able" else ""))
    if variant != "update, HOT-able":
        for sql in PARTIAL_INDEXES:
            await conn.execute(sql)
    meter = Meter(pid)
    for start in range(0, rows, batch):
        chosen = [bodies[(start + i) % len(bodies)] for i in range(batch)]
        async with conn.transaction():
            appended = await meter.timed("append", conn.fetch(APPEND, [new_event_id() for _ in chosen],
                                                              *[list(column) for column in zip(*chosen, strict=True)]))
        positions = [row["position"] for row in appended]
        async with conn.transaction():
            if variant == "delete":
                await meter.timed("publish", conn.execute(DELETE, positions))
            else:
                await meter.timed("publish", conn.execute(MARK, positions, [f"{p}-0" for p in positions]))
    await conn.execute("SELECT pg_stat_force_next_flush()")  # this backend's counters, before reading them
    await asyncio.sleep(0.1)
    hot = await conn.fetchrow("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                              " WHERE schemaname = 'scratch' AND relname = 'outbox'")  # fmt: skip
    return meter.spent, (hot["n_tup_hot_upd"] / hot["n_tup_upd"]) if hot and hot["n_tup_upd"] else 0.0


async def inbox_round(conn: asyncpg.Connection, pid: int, rows: int, batch: int) -> dict[str, list[float]]:
    await conn.execute("DROP TABLE IF EXISTS scratch.inbox")
    await conn.execute(INBOX)
    meter = Meter(pid)
    for _ in range(0, rows, batch):
        async with conn.transaction():
            await meter.timed("record", conn.fetch(RECORD, "ledger", [new_event_id() for _ in range(batch)]))
    return meter.spent


async def measure(url: str, rows: int, batch: int, rounds: int) -> None:
    conn = await asyncpg.connect(url)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    await conn.execute("CREATE SCHEMA IF NOT EXISTS scratch")
    bodies = sample_bodies()
    print(f"{rows} rows a variant and round, {batch}-row batches; bodies {min(len(b) for *_, b in bodies)}-"
          f"{max(len(b) for *_, b in bodies)} bytes")
    try:
        for round_no in range(rounds):
            order = VARIANTS if round_no % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                await asyncio.sleep(0.5)  # let the stats collector and WAL writer settle between variants
                spent, hot = await outbox_round(conn, pid, variant, rows, batch, bodies)
                phases = ", ".join(f"{phase} server {s / rows * 1e6:.1f} client {c / rows * 1e6:.1f}"
                                   for phase, (s, c) in spent.items())  # fmt: skip
                print(f"round {round_no + 1} outbox {variant:18s} µs/row: {phases}; HOT {hot:.0%}")
            spent = await inbox_round(conn, pid, rows, batch)
            (server, client), = spent.values()
            print(f"round {round_no + 1} inbox record         µs/row: server {server / rows * 1e6:.1f} client {client / rows * 1e6:.1f}")
    finally:
        await conn.execute("DROP SCHEMA scratch CASCADE")
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000)
    parser.add_argument("--batch", type=int, default=50, help="rows a transaction (relay batches at 250 tasks/s: tens)")
    parser.add_argument("--rounds", type=int, default=3)
    run_on_embedded_postgres(lambda args, url: measure(url, args.rows, args.batch, args.rounds), parser.parse_args())


if __name__ == "__main__":
    main()
