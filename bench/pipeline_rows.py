"""CPU per row of the pipeline's bulk inserts, variant against variant, on a bench database's real rows.

    python bench/pipeline.py --rates 250 --duration 20 --no-doc --keep /tmp/pipe-keep   # fills a database
    python bench/pipeline_rows.py /tmp/pipe-keep --rounds 3

Starts the embedded servers of that data dir again (nothing else runs), copies the rows the run left in
`audit.events` and `views.events`, and writes them into scratch tables (schema `scratch`, dropped at
the end) once per variant, in rounds of alternating order, a transaction per batch. It prints the CPU
per row of the PostgreSQL backend serving the connection (`/proc/<pid>/stat`, 10 ms ticks summed over
the whole table) and of this client (asyncpg's encoding):

- `audit.events`: the archive's insert with every index of migration 001, without `events_time`, and
  without `events_time` and `events_actor_time`; then INSERT ... unnest of 13 arrays against COPY, at
  the batch sizes given by `--audit-batches` (the archive's batches are ~470 rows at 250 tasks/s);
- `views.events`: the history insert with `facts` as jsonb or json, with or without the index
  `events_by_task_time` beside the primary key.

Measured alone, these are the costs of the statement and its indexes without the pipeline's other
work around them (the `--pg-stats` times are wall time in the executor and also count waiting for a
core on a busy machine).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from shared.embedded.backends import Backends
from shared.settings import Settings

TICKS = os.sysconf("SC_CLK_TCK")
AUDIT_COLUMNS = ("seq", "event_id", "type", "subject", "subject_seq", "producer", "actor", "occurred_at", "task_id",
                 "entry_id", "body", "prev_hash", "hash")  # fmt: skip
AUDIT_INDEXES = {
    "events_task": "(task_id, seq) WHERE task_id IS NOT NULL",
    "events_subject": "(subject, seq)",
    "events_type_time": "(type, occurred_at)",
    "events_actor_time": "(actor, occurred_at)",
    "events_time": "(occurred_at)",
}
AUDIT_INDEX_VARIANTS = {
    "7 indexes (migration 001)": tuple(AUDIT_INDEXES),
    "6, without events_time": ("events_task", "events_subject", "events_type_time", "events_actor_time"),
    "5, without events_time, events_actor_time": ("events_task", "events_subject", "events_type_time"),
}
AUDIT_INSERT = (
    f"INSERT INTO scratch.audit ({', '.join(AUDIT_COLUMNS)}) SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[],"
    " $4::text[], $5::bigint[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::text[], $11::text[],"
    " $12::text[], $13::text[])"
)
HISTORY_COLUMNS = "task_id, event_id, type, occurred_at, actor, state, reason, detail, facts"
HISTORY_VARIANTS = {  # facts type, with the index by task and time
    "facts jsonb + index by task, time (001/003)": ("jsonb", True),
    "facts json + index by task, time": ("json", True),
    "facts jsonb, primary key only": ("jsonb", False),
    "facts json, primary key only (005)": ("json", False),
}
HISTORY_BATCH = 160  # about the views' batches at 250 tasks/s

Round = Callable[[asyncpg.Connection, Sequence[tuple[Any, ...]], str], Awaitable[None]]


def backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def per_row_us(conn: asyncpg.Connection, pid: int, rows: Sequence[tuple[Any, ...]], write: Round, variant: str,
                     batch: int) -> tuple[float, float]:  # fmt: skip
    """(server, client) CPU µs per row of writing `rows` in batches of `batch`, one transaction each."""
    server, client = backend_cpu_s(pid), time.process_time()
    for start in range(0, len(rows), batch):
        async with conn.transaction():
            await write(conn, rows[start:start + batch], variant)
    return (backend_cpu_s(pid) - server) / len(rows) * 1e6, (time.process_time() - client) / len(rows) * 1e6


async def fresh_audit_table(conn: asyncpg.Connection, indexes: Sequence[str]) -> None:
    await conn.execute("DROP TABLE IF EXISTS scratch.audit")
    await conn.execute("CREATE TABLE scratch.audit (LIKE audit.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    await conn.execute("ALTER TABLE scratch.audit ADD PRIMARY KEY (seq), ADD UNIQUE (event_id)")
    for name in indexes:
        await conn.execute(f"CREATE INDEX ON scratch.audit {AUDIT_INDEXES[name]}")


async def audit_by_unnest(conn: asyncpg.Connection, rows: Sequence[tuple[Any, ...]], _: str) -> None:
    await conn.execute(AUDIT_INSERT, *[list(column) for column in zip(*rows, strict=True)])


async def audit_by_copy(conn: asyncpg.Connection, rows: Sequence[tuple[Any, ...]], _: str) -> None:
    await conn.copy_records_to_table("audit", schema_name="scratch", columns=AUDIT_COLUMNS, records=rows)


async def fresh_history_table(conn: asyncpg.Connection, variant: str) -> None:
    facts, indexed = HISTORY_VARIANTS[variant]
    await conn.execute("DROP TABLE IF EXISTS scratch.history")
    await conn.execute(
        "CREATE TABLE scratch.history (task_id text NOT NULL, event_id text NOT NULL, type text NOT NULL,"
        " occurred_at timestamptz NOT NULL, actor text NOT NULL, state text NOT NULL, reason text NOT NULL,"
        f" detail text NOT NULL, facts {facts}, PRIMARY KEY (task_id, event_id))"
    )
    if indexed:
        await conn.execute("CREATE INDEX ON scratch.history (task_id, occurred_at)")


async def history_insert(conn: asyncpg.Connection, rows: Sequence[tuple[Any, ...]], variant: str) -> None:
    facts, _ = HISTORY_VARIANTS[variant]
    await conn.execute(
        f"INSERT INTO scratch.history ({HISTORY_COLUMNS}) SELECT t.task_id, t.event_id, t.type, t.occurred_at, t.actor,"
        f" t.state, t.reason, t.detail, t.facts::{facts} FROM unnest($1::text[], $2::text[], $3::text[],"
        " $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])"
        f" AS t({HISTORY_COLUMNS}) ON CONFLICT DO NOTHING",
        *[list(column) for column in zip(*rows, strict=True)],
    )  # fmt: skip


def alternating(variants: Sequence[str], round_no: int) -> list[str]:
    return list(variants) if round_no % 2 == 0 else list(reversed(variants))


def report(title: str, results: dict[str, list[tuple[float, float]]]) -> None:
    print(title)
    for variant, rounds in results.items():
        servers = ", ".join(f"{server:.1f}" for server, _ in rounds)
        mean_server = sum(server for server, _ in rounds) / len(rounds)
        mean_client = sum(client for _, client in rounds) / len(rounds)
        print(f"  {variant:45s} server µs/row {servers} (mean {mean_server:.1f}); client mean {mean_client:.1f}")


async def measure(url: str, rounds: int, audit_batches: Sequence[int]) -> None:
    conn = await asyncpg.connect(url)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    await conn.execute("CREATE SCHEMA IF NOT EXISTS scratch")
    try:
        audit = [tuple(r) for r in await conn.fetch(f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit.events ORDER BY seq")]
        history = [tuple(r) for r in await conn.fetch(
            f"SELECT {HISTORY_COLUMNS.replace('facts', 'facts::text')} FROM views.events ORDER BY occurred_at")]  # fmt: skip
        print(f"rows: audit.events {len(audit)}, views.events {len(history)}")
        by_index: dict[str, list[tuple[float, float]]] = {v: [] for v in AUDIT_INDEX_VARIANTS}
        by_facts: dict[str, list[tuple[float, float]]] = {v: [] for v in HISTORY_VARIANTS}
        by_way: dict[str, list[tuple[float, float]]] = {f"{way}, {n}-row batches": [] for n in audit_batches
                                                        for way in ("INSERT ... unnest", "COPY")}  # fmt: skip
        for round_no in range(rounds):
            for variant in alternating(list(AUDIT_INDEX_VARIANTS), round_no):
                await fresh_audit_table(conn, AUDIT_INDEX_VARIANTS[variant])
                by_index[variant].append(await per_row_us(conn, pid, audit, audit_by_unnest, variant, 470))
            for variant in alternating(list(HISTORY_VARIANTS), round_no):
                await fresh_history_table(conn, variant)
                by_facts[variant].append(await per_row_us(conn, pid, history, history_insert, variant, HISTORY_BATCH))
            for variant in alternating(list(by_way), round_no):
                await fresh_audit_table(conn, tuple(AUDIT_INDEXES))
                write = audit_by_copy if variant.startswith("COPY") else audit_by_unnest
                batch = int(variant.split(", ")[1].split("-")[0])
                by_way[variant].append(await per_row_us(conn, pid, audit, write, variant, batch))
        report("audit.events insert (470-row batches), by index set:", by_index)
        report(f"views.events insert ({HISTORY_BATCH}-row batches):", by_facts)
        report("audit.events, every index, INSERT ... unnest against COPY:", by_way)
    finally:
        await conn.execute("DROP SCHEMA scratch CASCADE")
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path, help="the --keep dir of a bench/pipeline.py run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--audit-batches", default="10,50,470", help="batch sizes of the COPY comparison")
    args = parser.parse_args()
    with Backends(Settings(), args.data_dir / "backends", durable=False) as endpoints:
        asyncio.run(measure(endpoints.database_url, args.rounds, [int(n) for n in args.audit_batches.split(",")]))


if __name__ == "__main__":
    main()
