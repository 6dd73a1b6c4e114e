"""`store.save_changes` now against an older commit's, on the same changes, alternating, in one process.

Run: `.venv/bin/python bench/dispatcher_save_ab.py --old 5665e34 [--tasks 400] [--repeats 15]`. First the
dispatcher of `bench/dispatcher_writes.py` runs two rounds (a cycle granting `--tasks` tasks, a batch of
`report.finished` ending their leases) and the changes of the second round's two saves are kept with the
book each fold read. Then each save is replayed `--repeats` times with this tree's `save_changes` and with
the one in `--old` (`git show OLD:services/dispatcher/store.py`, loaded beside this tree's other modules),
alternating which goes first, each replay in its own transaction rolled back afterwards; wall time per
task of the save alone. Both replay against the same tables, so the difference is the save's code (what
it sends, how it builds the events), not the moment: the machine's load still spreads each side, so read
the medians and the per-repeat differences, and state the load.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench.dispatcher_writes as writes  # noqa: E402
from bench.ab_rounds import paired_line  # noqa: E402
import services.dispatcher.dispatch_loop as dispatch_loop  # noqa: E402
import services.dispatcher.report_handler as report_handler  # noqa: E402
from bench.throwaway_postgres import run_on_embedded_postgres  # noqa: E402
from services.dispatcher import store  # noqa: E402
from services.dispatcher.config import DispatcherConfig  # noqa: E402
from services.dispatcher.context import Dispatcher  # noqa: E402
from services.dispatcher.service import MIGRATIONS  # noqa: E402
from shared.delivery.db import create_pool  # noqa: E402
from shared.delivery.migrations import migrate, migrate_delivery  # noqa: E402
from shared.leasing.records import LeaseBook  # noqa: E402
from shared.leasing.work import BookChanges  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Kept:
    name: str
    changes: BookChanges
    stored: LeaseBook  # a copy of what the fold read, as it was then


def old_store(ref: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{ref}:services/dispatcher/store.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="old-store-")) / "old_store.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_store", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keeper(kept: list[Kept], name: str, save: Any) -> Any:
    async def keep(conn: Any, schema: str, emitter: Any, changes: Any, stored: LeaseBook | None = None) -> Any:
        changes = getattr(changes, "changes", changes)  # save_report_effects takes the effects
        assert stored is not None
        kept.append(Kept(name, changes, LeaseBook(tasks=dict(stored.tasks), leases=dict(stored.leases),
                                                  nodes=dict(stored.nodes))))
        return await save(conn, schema, emitter, changes, stored)
    return keep


async def capture(dc: Dispatcher, tasks: int) -> list[Kept]:
    kept: list[Kept] = []
    dispatch_loop.save_changes = keeper(kept, "cycle", store.save_changes)
    report_handler.save_report_effects = keeper(kept, "reports", store.save_changes)
    for round_ in range(2):
        kept.clear()
        await writes.arrive(dc, round_, tasks)
        assert (await dispatch_loop.run_cycle(dc)).effects is not None
        await writes.finish_all(dc)
    return kept


async def replay(dc: Dispatcher, save: Any, kept: Kept, with_book: bool) -> float:
    async with dc.pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            if kept.changes.granted:  # the GPUs of the grants replayed are free again (rolled back after)
                await conn.execute("DELETE FROM dispatcher.lease_gpus WHERE lease_id = ANY($1::text[])",
                                   sorted(kept.changes.granted))
            started = time.perf_counter()
            if with_book:
                await save(conn, dc.schema, dc.emitter, kept.changes, kept.stored)
            else:
                await save(conn, dc.schema, dc.emitter, kept.changes)
            return time.perf_counter() - started
        finally:
            await transaction.rollback()


async def run(args: argparse.Namespace, dsn: str) -> None:
    old = old_store(args.old)
    pool = await create_pool(dsn)
    try:
        await migrate_delivery(pool, "dispatcher")
        await migrate(pool, "dispatcher", MIGRATIONS)
        epoch = await pool.fetchval("UPDATE dispatcher.leader SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch")
        dc = Dispatcher(pool, "dispatcher", "dispatcher/bench", "service:dispatcher", DispatcherConfig(), epoch)
        await writes.fleet(dc, args.nodes)
        kept = await capture(dc, args.tasks)
        sides = {"new": (store.save_changes, True), f"old {args.old}": (old.save_changes, False)}
        times: dict[tuple[str, str], list[float]] = {}
        for repeat in range(args.repeats):
            order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
            for save_of in kept:
                for side in order:
                    save, with_book = sides[side]
                    elapsed = await replay(dc, save, save_of, with_book)
                    times.setdefault((save_of.name, side), []).append(elapsed * 1000 / args.tasks)
    finally:
        await pool.close()
    print(f"{args.repeats} repeats of {args.tasks} tasks' saves; load average now {os.getloadavg()[0]:.2f}")
    print("  ms per task        median   best")
    for (name, side), values in times.items():
        print(f"  {name:8} {side:14} {statistics.median(values):6.3f} {min(values):6.3f}")
    for name in ("cycle", "reports"):
        print(paired_line(name, times[(name, "new")], times[(name, f"old {args.old}")], "ms per task", 3, "repeat"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="git ref whose services/dispatcher/store.py to compare with")
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=15)
    run_on_embedded_postgres(run, parser.parse_args())


if __name__ == "__main__":
    main()
