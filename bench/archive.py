"""How fast the audit archive appends, checks and replays (embedded PostgreSQL, one process).

    .venv/bin/python bench/archive.py [--events 50000] [--batch 500]

1. append: `services.audit.archive.archive_events` in batches (parse each entry as the archiver
   does, link the chain, insert) — events/s, to compare with what cf:events carries at the
   pipeline's sustained rate;
2. chain check: `verify.check_chain` over the whole archive — events/s;
3. replay: fold the whole archive through `shared.replay` (parsing, upcasting, `evolve`) — events/s.

The events are a realistic mix per task: submitted, readiness, matched, queued, granted, started,
two checkpoints, three renewals, released, two usage records, succeeded (15 per task).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console

from services.audit.archive import archivable, archive_events, prepare_archive
from services.audit.verify import VerifyReport, check_chain
from shared.delivery.entry_steps import Entry
from shared.delivery.db import create_pool
from shared.delivery.wire import wire_fields
from shared.events import Envelope, make_event
from shared.events.subjects import lease_subject, task_subject
from shared.replay import ReplayState, replay_event
from services.audit.reading import archived_events

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.throwaway_postgres import run_on_embedded_postgres  # noqa: E402

console = Console()
T0 = datetime(2026, 1, 5, tzinfo=UTC)
SUBMISSION = {"name": "bench", "project": "llm", "priority_class": "standard", "gpus": 2, "estimate_gpu_hours": 2.0,
              "profile": "compute", "output_unit": "samples"}  # fmt: skip


def task_events(n: int) -> list[Envelope]:
    task, lease, at = f"T{n:07d}", f"L{n:07d}", T0 + timedelta(seconds=n)

    def ev(kind: str, subject: str, seq: int, producer: str, data: dict, offset: float = 0.0) -> Envelope:
        return make_event(kind, subject=subject, subject_seq=seq, producer=producer, actor="service:bench",
                          occurred_at=at + timedelta(seconds=offset), data=data)  # fmt: skip

    t, ls = task_subject(task), lease_subject(lease)
    usage = {"lease_id": lease, "task_id": task, "project": "llm", "card_type": "H100", "gpu_seconds": 60.0, "cost": 0.2}
    events = [
        ev("task.submitted", t, 1, "intake/b", {"task_id": task, "idempotency_key": task, "submission": SUBMISSION}),
        ev("task.readiness_changed", t, 1, "readiness/b", {"task_id": task, "ready": True, "ready_fraction": 1.0}),
        ev("task.matched", t, 1, "matcher/b", {"task_id": task, "chosen": "H100", "reason": "cheapest",
                                               "ranking": [{"card_type": "H100", "est_runtime_s": 3600, "est_cost": 20}]}),
        ev("task.queued", t, 1, "dispatcher/b", {"task_id": task, "project": "llm", "priority_class": "standard", "priority": 0}),
        ev("lease.granted", ls, 1, "dispatcher/b", {"lease_id": lease, "task_id": task, "agent_id": "a", "node_id": "n",
                                                   "card_type": "H100", "gpu_indices": [0, 1], "fencing_token": n + 1,
                                                   "ttl_s": 30, "expires_at": at + timedelta(seconds=30)}, 1),
        ev("task.started", t, 2, "dispatcher/b", {"task_id": task, "lease_id": lease, "node_id": "n"}, 2),
    ]  # fmt: skip
    events += [ev("task.checkpointed", t, 3 + i, "dispatcher/b", {"task_id": task, "lease_id": lease,
                                                                 "checkpoint_uri": f"s3://c/{task}/{i}"}, 3 + i)
               for i in range(2)]  # fmt: skip
    events += [ev("lease.renewed", ls, 2 + i, "dispatcher/b", {"lease_id": lease, "task_id": task,
                                                              "until": at + timedelta(seconds=60 + i)}, 5 + i)
               for i in range(3)]  # fmt: skip
    events += [
        ev("lease.released", ls, 5, "dispatcher/b", {"lease_id": lease, "task_id": task, "node_id": "n", "card_type": "H100",
                                                     "gpus": 2, "granted_at": at + timedelta(seconds=1),
                                                     "ended_at": at + timedelta(seconds=61), "reason": "succeeded"}, 9),
        ev("usage.recorded", ls, 1, "ledger/b", usage, 10), ev("usage.recorded", ls, 2, "ledger/b", usage, 11),
        ev("task.succeeded", t, 5, "dispatcher/b", {"task_id": task, "lease_id": lease, "output_units": 10.0}, 12),
    ]  # fmt: skip
    return events


def stream_entries(events: list[Envelope]) -> list[Entry]:
    """The entries as the relay XADDs them (built before timing: the relay's work, not the archiver's)."""
    return [Entry(f"{n}-0", {k.encode(): v.encode() for k, v in wire_fields(e).items()}) for n, e in enumerate(events, 1)]


async def bench(dsn: str, count: int, batch: int) -> None:
    pool = await create_pool(dsn)
    try:
        await prepare_archive(pool)
        events = [e for n in range(count // 15 + 1) for e in task_events(n)][:count]
        wire = stream_entries(events)
        started, cpu = time.perf_counter(), os.times()
        for first in range(0, len(wire), batch):
            async with pool.acquire() as conn, conn.transaction():
                await archive_events(conn, [archivable(entry) for entry in wire[first:first + batch]])
        append_s, append_cpu = time.perf_counter() - started, _cpu_since(cpu)
        started = time.perf_counter()
        report = VerifyReport()
        await check_chain(pool, report)
        chain_s = time.perf_counter() - started
        started = time.perf_counter()
        state = ReplayState()
        async for item in archived_events(pool):
            replay_event(state, item.event)
        replay_s = time.perf_counter() - started
    finally:
        await pool.close()
    assert report.chain_break is None and report.events == len(events) and len(state.tasks) == count // 15 + (count % 15 > 0)
    console.print(f"events {len(events):,}, batches of {batch}")
    console.print(f"append (parse, link, insert): {len(events) / append_s:,.0f} events/s ({append_s:.1f} s;"
                  f" archiver CPU {append_cpu / len(events) * 1e6:.0f} µs per event)")
    console.print(f"chain check:                  {len(events) / chain_s:,.0f} events/s ({chain_s:.1f} s)")
    console.print(f"replay (parse, fold):         {len(events) / replay_s:,.0f} events/s ({replay_s:.1f} s)")


def _cpu_since(before: os.times_result) -> float:
    now = os.times()
    return (now.user - before.user) + (now.system - before.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    run_on_embedded_postgres(lambda args, url: bench(url, args.events, args.batch), parser.parse_args())


if __name__ == "__main__":
    main()
