"""Readiness's handling of submission batches now against an older commit's, alternating, in one process.

Run: `.venv/bin/python bench/readiness_batches.py --old 224a1e4 [--batches 50] [--size 6] [--rounds 8]`. On a
throwaway embedded PostgreSQL, each round hands `services.readiness.service.handle_events` `--batches` batches of
`--size` fresh `task.submitted` events (tasks without inputs, as `bench/pipeline.py` submits them: the batch
size readiness sees at 250 tasks/s offered), once with this tree's readiness code and once with `--old`'s
(`service.py`, `recheck.py` and `store.py` from `git show`, loaded beside this tree's other modules), alternating
which goes first; the tables are analysed after the first (warm-up) round. Prints, per task, this process's CPU and the CPU of the PostgreSQL backend serving it (one
connection, from `/proc`), and the commits PostgreSQL counted (`pg_stat_database`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import paired_line  # noqa: E402
from bench.throwaway_postgres import run_on_embedded_postgres  # noqa: E402
from services.common.runtime import ServiceContext, prepare_schema  # noqa: E402
from services.readiness import service as new_service  # noqa: E402
from services.readiness.recheck import Checker  # noqa: E402
from shared.delivery import create_pool  # noqa: E402
from shared.events import TaskSubmitted, make_event  # noqa: E402
from shared.events.subjects import task_subject  # noqa: E402
from shared.settings import Settings  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MODULES = ("store", "recheck", "service")  # in import order: each old module imports the ones before it


def old_readiness(ref: str) -> ModuleType:
    """`services.readiness.service` as it was at `ref`, importing the `store` and `recheck` of `ref` too."""
    folder = Path(tempfile.mkdtemp(prefix="old-readiness-"))
    loaded: dict[str, ModuleType] = {}
    for name in MODULES:
        source = subprocess.run(["git", "show", f"{ref}:services/readiness/{name}.py"], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout  # fmt: skip
        for earlier in loaded:
            source = source.replace(f"services.readiness.{earlier} ", f"old_readiness_{earlier} ")
        path = folder / f"old_readiness_{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"old_readiness_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        loaded[name] = module
    return loaded["service"]


class NoObjectStore:
    async def head(self, bucket: str, key: str) -> object | None:
        raise AssertionError("nothing here has an S3 input")


def submissions(prefix: str, count: int) -> list[TaskSubmitted]:
    submission = {"name": "bench", "project": "bench", "priority_class": "standard", "gpus": 1,
                  "estimate_gpu_hours": 0.01, "profile": "compute"}  # fmt: skip
    return [
        make_event(TaskSubmitted, subject=task_subject(f"{prefix}-{i}"), subject_seq=1, producer="intake/bench",
                   actor="user:bench", data={"task_id": f"{prefix}-{i}", "idempotency_key": f"{prefix}-{i}",
                                             "submission": submission})  # fmt: skip
        for i in range(count)
    ]


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_side(handle: Any, ctx: ServiceContext, checker: Checker, batches: list[list[TaskSubmitted]],
                   backend: int) -> tuple[float, float, int]:  # fmt: skip
    """CPU seconds of this process and of the backend, and commits, for handling `batches`."""
    commits0 = await _commits(ctx)
    cpu0, pg0 = time.process_time(), backend_cpu(backend)
    for batch in batches:
        await handle(ctx, checker, batch)
    cpu1, pg1 = time.process_time(), backend_cpu(backend)
    commits1 = await _commits(ctx)
    return cpu1 - cpu0, pg1 - pg0, commits1 - commits0 - 2  # less `_commits`'s own two transactions


async def _commits(ctx: ServiceContext) -> int:
    """Commits so far in this database, with the one backend's pending statistics flushed first."""
    await ctx.pool.execute("SELECT pg_stat_force_next_flush()")  # flushed when this statement's transaction ends
    return await ctx.pool.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")


async def measure(args: argparse.Namespace, dsn: str) -> None:
    old = old_readiness(args.old)
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        spec = new_service.SPEC
        await prepare_schema(pool, spec)
        ctx = ServiceContext(spec, Settings(), pool, redis=None, broker=None, stop=asyncio.Event())  # type: ignore[arg-type]
        checker = Checker(pool, ctx.emitter, NoObjectStore())
        backend = await pool.fetchval("SELECT pg_backend_pid()")
        sides = {"new": new_service.handle_events, f"old {args.old}": old.handle_events}
        results: dict[str, list[tuple[float, float, int]]] = {side: [] for side in sides}
        per_round = args.batches * args.size
        for round_ in range(args.rounds + 1):  # the first round warms up
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                events = submissions(f"r{round_}-{side.split()[0]}", per_round)
                batches = [events[i:i + args.size] for i in range(0, per_round, args.size)]
                outcome = await one_side(sides[side], ctx, checker, batches, backend)
                if round_:
                    results[side].append(outcome)
            if not round_:  # plans as on an analysed table, not a young one's sequential scans, for both sides
                await pool.execute("ANALYZE readiness.tasks, readiness.inputs, readiness.subject_seq, readiness.outbox")
    finally:
        await pool.close()
    print(f"{args.rounds} rounds of {args.batches} batches of {args.size} submissions; load average now"
          f" {os.getloadavg()[0]:.2f}")
    print("  per task                 process CPU µs (median, best)   PostgreSQL backend CPU µs   commits")
    for side, rows in results.items():
        proc = [r[0] * 1e6 / per_round for r in rows]
        pg = [r[1] * 1e6 / per_round for r in rows]
        commits = statistics.median(r[2] for r in rows) / per_round
        print(f"  {side:22} {statistics.median(proc):8.0f} {min(proc):8.0f}          {statistics.median(pg):8.0f}"
              f" {min(pg):8.0f}        {commits:6.2f}")
    new, older = results["new"], results[f"old {args.old}"]
    for index, name in ((0, "process"), (1, "PostgreSQL")):
        print(paired_line(name, [r[index] * 1e6 / per_round for r in new], [r[index] * 1e6 / per_round for r in older],
                          "µs per task", 0, "round"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="git ref whose services/readiness/{store,recheck,service}.py to compare with")
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--size", type=int, default=6, help="submissions per batch")
    parser.add_argument("--rounds", type=int, default=8)
    run_on_embedded_postgres(measure, parser.parse_args())


if __name__ == "__main__":
    main()
