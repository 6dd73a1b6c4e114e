"""The ledger's quota check and its usage writes: what each costs as the usage inside the windows grows.

Run: `.venv/bin/python bench/quota_check.py [--sizes 1000,10000,100000] [--accounts 4] [--checks 20]`. On a
throwaway embedded PostgreSQL with the ledger's tables, `--accounts` accounts share one project's usage (one
without a card type, the others per card type), whose window holds the usage. The usage is written by the
ledger's own statement (`services.ledger.store.INSERT_INCREMENTS_SQL`, which adds each batch's increments to
the accounts' running totals) in batches of `--batch` increments; after each size, an `ANALYZE` (as autovacuum
would), then the quota check's read both ways, alternating, `--checks` times each:

- *re-sum*: each account's whole window summed from `ledger.usage_increments` (`quotas.USED_GPU_SECONDS_SQL`,
  the check's read before session 22);
- *running*: `quotas.load_quota_status`, which reads each account's running total (one row per account).

Prints per check the rows read from `usage_increments` (sequential and index fetches, `pg_stat_xact_user_tables`)
and the PostgreSQL backend's CPU (from `/proc`, its clock ticks summed over the checks, per check), and the writes' cost both ways: the same
batches written with and without the running totals' update (alternating batch by batch, backend CPU per
increment; the plain batches' usage is then counted into the totals, untimed, and both reads must agree).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.views_batches import backend_cpu  # noqa: E402

START = datetime(2026, 1, 5, tzinfo=UTC)
CARDS = ("H100", "A10", "L40S")


def increment_rows(first: int, count: int) -> list[list[Any]]:
    """`count` one-minute increments of one lease each, starting a second apart, on the cards in turn."""
    n = range(first, first + count)
    starts = [START + timedelta(seconds=i) for i in n]
    return [[f"L{i}" for i in n], starts, [s + timedelta(minutes=1) for s in starts], [f"T{i}" for i in n],
            ["bench"] * count, [CARDS[i % len(CARDS)] for i in n], [1] * count, [60] * count, [0.05] * count,
            ["E"] * count, [0] * count]  # fmt: skip


async def write_usage(conn: Any, first: int, count: int, batch: int) -> dict[str, float]:
    """Write `count` increments in batches, alternately with and without the running totals' update."""
    from services.ledger.quotas import lock_usage, recount_used
    from services.ledger.store import INSERT_INCREMENTS_SQL

    plain = INSERT_INCREMENTS_SQL.split("counted AS (", 1)[1].split(" RETURNING ", 1)[0]
    backend = await conn.fetchval("SELECT pg_backend_pid()")
    spent = {"running": 0.0, "plain": 0.0}
    written = {"running": 0, "plain": 0}
    for number, at in enumerate(range(first, first + count, batch)):
        way = "running" if number % 2 == 0 else "plain"
        rows = increment_rows(at, min(batch, first + count - at))
        before = backend_cpu(backend)
        async with conn.transaction():
            await lock_usage(conn)
            await conn.execute(INSERT_INCREMENTS_SQL if way == "running" else plain, *rows)
        spent[way] += backend_cpu(backend) - before
        written[way] += len(rows[0])
    async with conn.transaction():  # the plain batches' usage into the totals too (not timed)
        await lock_usage(conn)
        for account_id in await conn.fetch("SELECT account_id FROM ledger.quotas"):
            await recount_used(conn, account_id["account_id"])
    return {way: spent[way] / max(written[way], 1) * 1e6 for way in spent}


async def increments_read(conn: Any) -> int:
    """Rows of `ledger.usage_increments` this backend has read and not yet reported (sequential and index fetches)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return await conn.fetchval(
        "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_xact_user_tables"
        " WHERE schemaname = 'ledger' AND relname = 'usage_increments'")  # fmt: skip


async def check_both_ways(conn: Any, checks: int) -> dict[str, dict[str, float]]:
    from services.ledger.quotas import LATE_USAGE_GRACE, USED_GPU_SECONDS_SQL, load_quota_status

    resum = (f"SELECT q.account_id, {USED_GPU_SECONDS_SQL} / 3600 AS used_gpu_hours FROM ledger.quotas q"
             " WHERE q.valid_from <= $1 AND q.valid_to + $2::interval > $1")  # fmt: skip
    now = START + timedelta(days=1)
    backend = await conn.fetchval("SELECT pg_backend_pid()")
    seen: dict[str, dict[str, Any]] = {"resum": {}, "running": {}}
    cpu: dict[str, list[float]] = {"resum": [], "running": []}
    rows: dict[str, list[int]] = {"resum": [], "running": []}
    for n in range(2 * checks):
        way = ("resum", "running")[n % 2]
        async with conn.transaction():
            read_before = await increments_read(conn)
            before = backend_cpu(backend)
            if way == "resum":
                got = {r["account_id"]: r["used_gpu_hours"] for r in await conn.fetch(resum, now, LATE_USAGE_GRACE)}
            else:
                got = {s.account_id: s.used_gpu_hours for s in await load_quota_status(conn, active_at=now)}
            cpu[way].append(backend_cpu(backend) - before)
            rows[way].append(await increments_read(conn) - read_before)
        seen[way] = got
    if seen["resum"] != seen["running"]:
        raise AssertionError(f"the running totals differ from the windows re-summed: {seen}")
    return {way: {"rows": statistics.median(rows[way]), "cpu_ms": sum(cpu[way]) * 1e3 / checks} for way in cpu}


async def measure(args: argparse.Namespace, dsn: str) -> None:
    import asyncpg

    from services.common.runtime import Emitter, prepare_schema
    from services.ledger.quotas import grant_quota
    from services.ledger.service import build_spec

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    await prepare_schema(pool, build_spec())
    emitter = Emitter("ledger", "ledger/bench", "user:bench")
    async with pool.acquire() as conn:
        async with conn.transaction():
            for n in range(args.accounts):
                await grant_quota(conn, emitter, project="bench", gpu_hours=1e6, valid_from=START,
                                  valid_to=START + timedelta(days=30), card_type=None if n == 0 else CARDS[(n - 1) % 3],
                                  account_id=f"a{n}")  # fmt: skip
        print(f"{args.accounts} accounts of one project; batches of {args.batch} increments; {args.checks} checks"
              " each way per size (alternating)")
        print("  usage in window   re-sum: rows read, backend CPU ms   running: rows read, backend CPU ms"
              "   write µs/increment: running, plain")
        written = 0
        for size in args.sizes:
            writes = await write_usage(conn, written, size - written, args.batch)
            written = size
            await conn.execute("ANALYZE ledger.usage_increments, ledger.quotas")
            ways = await check_both_ways(conn, args.checks)
            print(f"  {size:15,} {ways['resum']['rows']:14,.0f} {ways['resum']['cpu_ms']:16.2f}"
                  f" {ways['running']['rows']:17,.0f} {ways['running']['cpu_ms']:17.2f}"
                  f" {writes['running']:22.1f} {writes['plain']:6.1f}")
    await pool.close()
    print(f"load average now: {os.getloadavg()[0]:.2f} (backend CPU is in clock ticks: 10 ms each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1_000, 10_000, 100_000])
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    from bench.throwaway_postgres import run_on_embedded_postgres

    run_on_embedded_postgres(measure, parser.parse_args())


if __name__ == "__main__":
    main()
