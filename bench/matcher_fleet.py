"""What a matcher batch pays to know the fleet: every node loaded vs the kept fleet's version read.

Run: `.venv/bin/python bench/matcher_fleet.py [--nodes 50 1000 10000] [--repeats 30]`. On a throwaway embedded
PostgreSQL, for each fleet size: `matcher.fleet` filled with that many nodes, then `--repeats` transactions that
take the fleet lock shared and read the fleet as a matcher batch does — once with `load_nodes` (every row, what
every batch did before `KeptFleet`) and once with a warm `KeptFleet` (one `fleet_version` row). Prints the median
wall time and the matcher process's CPU per batch (PostgreSQL's own CPU is not counted).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import asyncpg  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.throwaway_postgres import run_on_embedded_postgres  # noqa: E402
from services.matcher.batch import NodeState  # noqa: E402
from services.matcher.service import MIGRATIONS  # noqa: E402
from services.matcher.store import KeptFleet, load_nodes, lock_fleet, save_nodes  # noqa: E402
from shared.delivery import create_pool  # noqa: E402
from shared.delivery.migrations import migrate  # noqa: E402

AT = datetime(2026, 12, 4, tzinfo=UTC)
Reader = Callable[[asyncpg.Connection], Awaitable[Mapping[str, NodeState]]]


async def fill(conn: asyncpg.Connection, count: int) -> None:
    """Replace the fleet with `count` 8-GPU nodes of two card types."""
    nodes = [NodeState(f"n{i:05d}", f"agent-{i:05d}", "H100" if i % 2 else "L40S", 8, True, AT) for i in range(count)]
    async with conn.transaction():
        await lock_fleet(conn, exclusive=True)
        await conn.execute("DELETE FROM matcher.fleet")
        await save_nodes(conn, nodes)


async def per_batch(conn: asyncpg.Connection, read: Reader, repeats: int, count: int) -> tuple[float, float]:
    """Median wall and CPU ms of one shared-locked fleet read."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        async with conn.transaction():
            await lock_fleet(conn, exclusive=False)
            nodes = await read(conn)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        assert len(nodes) == count
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


async def measure(args: argparse.Namespace, database_url: str) -> None:
    table = Table(title="a matcher batch's fleet read (median per batch)")
    for column in ("nodes", "every node: wall ms", "every node: CPU ms", "kept fleet: wall ms", "kept fleet: CPU ms"):
        table.add_column(column, justify="right")
    async with await create_pool(database_url, min_size=1, max_size=1) as pool:
        await migrate(pool, "matcher", MIGRATIONS)
        async with pool.acquire() as conn:
            for count in args.nodes:
                await fill(conn, count)
                every = await per_batch(conn, load_nodes, args.repeats, count)
                kept = await per_batch(conn, KeptFleet().nodes, args.repeats, count)
                table.add_row(f"{count:,}", *(f"{ms:.2f}" for ms in (*every, *kept)))
    Console().print(table)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=30)
    run_on_embedded_postgres(measure, parser.parse_args())


if __name__ == "__main__":
    main()
