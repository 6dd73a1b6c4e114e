"""The views service's batches: this tree's projection of `cf:events` against another tree's, alternating.

Run: `.venv/bin/python bench/views_batches.py --old /path/to/other/worktree [--tasks 600] [--rounds 8] [--batch-every 0.1]`. On a
throwaway embedded PostgreSQL (one database per side, each migrated by its own tree), each round hands a worker
process per side the same stream of fresh tasks' events, cut into the batches the views read at 250 tasks/s
offered in `bench/pipeline.py` (a batch every 100 ms): per task `task.submitted`, `task.readiness_changed`,
`task.matched`, a `lease.granted` carrying the queue entry, a `task.succeeded` carrying the run's start and the
lease's end, and its usage as a slice of the ledger's `usage.batch_recorded` (one carrier per 250 ms of ends,
the ledger's linger). Each worker parses the bodies (`services.console.projector.parse_projected`) and applies
each batch in a transaction (`services.console.store.apply_events`), as the service does. Sides alternate
which goes first; a first round warms up and is followed by an `ANALYZE`. Prints, per task, the worker's CPU
and the CPU of the PostgreSQL backend serving it (from `/proc`), and rows written per task.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

if "--worker" not in sys.argv:  # a worker imports the tree its PYTHONPATH names
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = Path(__file__).resolve().parent.parent
WORKER_DSN = "VIEWS_BATCHES_DSN"
"""The environment variable that hands a worker its database's URL (not its command line)."""
BATCH_EVERY_S = 0.1
"""The views read a batch about every 100 ms at 250 tasks/s offered (bench/pipeline.py --pg-stats)."""
USAGE_EVERY_S = 0.25
"""The ledger's linger: one usage carrier per project per 250 ms of ends."""
STAGES_S = {"submitted": 0.0, "readiness": 0.05, "matched": 0.06, "granted": 0.5, "succeeded": 1.2, "usage": 2.0}
"""When each of a task's events reaches the views after its submission (the pipeline's stage lags at 250/s)."""


def task_events(prefix: str, tasks: int, rate: float) -> list[tuple[float, Any]]:
    """(arrival time, event) of `tasks` tasks submitted at `rate` per second, in arrival order."""
    from tests.helpers.task_events import TaskStory, a_submission
    from shared.events import make_event

    timed: list[tuple[float, Any]] = []
    ends: dict[int, list[Any]] = {}
    for i in range(tasks):
        at = i / rate
        story = TaskStory(f"{prefix}-{i:05d}")
        submission = a_submission(name="bench", project="bench", gpus=1, estimate_gpu_hours=0.01, inputs=[])
        timed.append((at + STAGES_S["submitted"], story.emit("intake", "task.submitted", {
            "task_id": story.task_id, "idempotency_key": story.task_id, "submission": submission})))
        timed.append((at + STAGES_S["readiness"], story.readiness(ready=True)))
        timed.append((at + STAGES_S["matched"], story.matched(chosen="H100")))
        timed.append((at + STAGES_S["granted"], story.granted(node="n1", card="H100", gpus=(i % 8,), queued=True)))
        timed.append((at + STAGES_S["succeeded"], story.succeeded(started_on="n1", releasing=True)))
        slot = int((at + STAGES_S["usage"]) / USAGE_EVERY_S)
        ends.setdefault(slot, []).append(story.usage(gpu_seconds=11.25, cost=0.01))
    for number, (slot, slices) in enumerate(sorted(ends.items()), start=1):
        carrier = make_event(
            "usage.batch_recorded", subject="usage/bench", subject_seq=number, producer="ledger/bench",
            actor="service:ledger", occurred_at=max(s.occurred_at for s in slices) + timedelta(seconds=1),
            data={"project": "bench", "slices": [s.data.model_dump(exclude={"project"}) for s in slices]},
        )  # fmt: skip
        timed.append(((slot + 1) * USAGE_EVERY_S, carrier))
    return sorted(timed, key=lambda pair: pair[0])


def batches_of(timed: list[tuple[float, Any]], every_s: float = BATCH_EVERY_S) -> list[list[dict[bytes, bytes]]]:
    """The events as stream entries' fields, cut into one batch per `every_s` of arrivals."""
    from shared.delivery.wire import BODY_FIELD
    from shared.events.envelope import canonical_json

    cut: dict[int, list[dict[bytes, bytes]]] = {}
    for at, event in timed:
        fields = {b"type": event.type.encode(), BODY_FIELD.encode(): canonical_json(event)}
        cut.setdefault(int(at / every_s), []).append(fields)
    return [cut[k] for k in sorted(cut)]


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def work(dsn: str, prefix: str, tasks: int, analyse: bool, every_s: float) -> dict[str, float]:
    """One side's round, in a worker whose `sys.path` starts at its tree."""
    import asyncpg

    from services.common.runtime import prepare_schema
    from services.console.projector import SPEC, Ignored, parse_projected
    from services.console.store import ViewCache, apply_events
    from shared.delivery.entry_steps import Entry

    batches = batches_of(task_events(prefix, tasks, rate=250.0), every_s)
    conn = await asyncpg.connect(dsn)
    try:
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
        await prepare_schema(pool, SPEC)
        await pool.close()
        if analyse:
            await conn.execute("ANALYZE views.tasks, views.events, views.leases")
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        before = await _rows_written(conn)
        cache = ViewCache()
        cpu0, pg0 = time.process_time(), backend_cpu(backend)
        for batch in batches:
            parsed = [parse_projected(Entry("0-0", fields)) for fields in batch]
            async with conn.transaction():
                await apply_events(conn, [e for e in parsed if not isinstance(e, Ignored)], cache)
        cpu1, pg1 = time.process_time(), backend_cpu(backend)
        after = await _rows_written(conn)
    finally:
        await conn.close()
    return {"cpu": cpu1 - cpu0, "pg": pg1 - pg0, "rows": int(after[0] - before[0]), "batches": len(batches),
            "view_writes": int(after[1] - before[1])}


async def _rows_written(conn: Any) -> tuple[int, int]:
    """Rows inserted or updated in the `views` schema, and of those in `views.tasks` (the views' writes)."""
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    row = await conn.fetchrow(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0) AS rows,"
        " coalesce(sum(n_tup_ins + n_tup_upd) FILTER (WHERE relname = 'tasks'), 0) AS views"
        " FROM pg_stat_user_tables WHERE schemaname = 'views'")  # fmt: skip
    return row["rows"], row["views"]


def run_side(tree: Path, dsn: str, prefix: str, tasks: int, analyse: bool, every_s: float) -> dict[str, float]:
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--prefix", prefix, "--tasks", str(tasks),
            "--batch-every", str(every_s), *(["--analyse"] if analyse else [])]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree), WORKER_DSN: dsn}
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"worker failed:\n{done.stderr}")
    out = done.stdout
    return json.loads(out.strip().splitlines()[-1])


async def measure(args: argparse.Namespace, dsn: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(dsn)
    sides = {"new": REPO, "old": Path(args.old).resolve()}
    dsns = {}
    for side in sides:
        await admin.execute(f"CREATE DATABASE views_{side}")
        dsns[side] = dsn.rsplit("/", 1)[0] + f"/views_{side}" + ("?" + dsn.split("?", 1)[1] if "?" in dsn else "")
    await admin.close()
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for round_ in range(args.rounds + 1):  # the first round warms up
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for side in order:
            outcome = run_side(sides[side], dsns[side], f"r{round_}", args.tasks, round_ == 1, args.batch_every)
            if round_:
                results[side].append(outcome)
    n = args.tasks
    print(f"{args.rounds} rounds of {n} tasks ({results['new'][0]['batches']:.0f} batches, one per"
          f" {args.batch_every:g} s of arrivals); load average now {os.getloadavg()[0]:.2f}")
    print("  per task        worker CPU µs (median, best)   PostgreSQL backend CPU µs (median, best)   rows written"
          "   view writes")
    for side, rows in results.items():
        proc = [r["cpu"] * 1e6 / n for r in rows]
        pg = [r["pg"] * 1e6 / n for r in rows]
        written = statistics.median(r["rows"] for r in rows) / n
        view_writes = statistics.median(r["view_writes"] for r in rows) / n
        print(f"  {side:8} {statistics.median(proc):12.0f} {min(proc):8.0f} {statistics.median(pg):22.0f}"
              f" {min(pg):8.0f} {written:18.2f} {view_writes:13.2f}")
    from bench.ab_rounds import paired_line

    for key, name in (("cpu", "worker"), ("pg", "PostgreSQL")):
        print(paired_line(name, [r[key] * 1e6 / n for r in results["new"]], [r[key] * 1e6 / n for r in results["old"]],
                          "µs per task", 0, "round"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="the other tree (a worktree) whose views code to compare with")
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batch-every", type=float, default=BATCH_EVERY_S,
                        help="seconds of arrivals per batch (default: as the views read at 250/s; longer = a linger)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--analyse", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import asyncio

        print(json.dumps(asyncio.run(work(os.environ[WORKER_DSN], args.prefix, args.tasks, args.analyse,
                                          args.batch_every))))
        return
    if not args.old:
        parser.error("--old is required")
    from bench.throwaway_postgres import run_on_embedded_postgres

    run_on_embedded_postgres(measure, args)


if __name__ == "__main__":
    main()
