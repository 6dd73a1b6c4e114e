"""The dispatcher's serial write chain per task, without the rest of the pipeline: one real `Dispatcher`
on an embedded PostgreSQL, its real cycle and report handler, timed per step and per save.

Run: `.venv/bin/python bench/dispatcher_writes.py [--rounds 12] [--tasks 400] [--nodes 100] [--steps 1000]`. The dispatcher
leads a fleet of `--nodes` nodes of 8 GPUs (all registered, alive). Each round:

1. `--tasks` complete, queued tasks arrive (one write step, as the facets' step would leave them);
2. a cycle grants them all (`dispatch_loop.run_cycle`: plan, `apply_plan`, `store.save_changes`, commit);
3. one batch of `report.finished` ends every lease (`report_handler.handle_reports`: the task succeeds,
   the lease is released).

Then `--steps` small write steps (one heartbeat-sized row update each, as a batch of reports about one
lease would write): the fixed cost of a step — its lock, connection, BEGIN and epoch check, commit.

Prints, per task and summed over the rounds after the first (the warm-up), the wall time of the cycle's
and the report batch's step and of their `save_*` call inside it, and the PostgreSQL backend's and this
process's CPU over the measured rounds; the load average before and after. Wall times wait for PostgreSQL
on the same cores: compare runs in the same minutes, alternating, best of several.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import services.dispatcher.dispatch_loop as dispatch_loop  # noqa: E402
import services.dispatcher.report_handler as report_handler  # noqa: E402
from bench.throwaway_postgres import run_on_embedded_postgres  # noqa: E402
from services.common.runtime import Emitter  # noqa: E402
from services.dispatcher.config import DispatcherConfig  # noqa: E402
from services.dispatcher.context import Dispatcher  # noqa: E402
from services.dispatcher.service import MIGRATIONS  # noqa: E402
from services.dispatcher.store import save_changes  # noqa: E402
from shared.delivery.arrival import Arrived  # noqa: E402
from shared.delivery.db import create_pool  # noqa: E402
from shared.delivery.migrations import migrate, migrate_delivery  # noqa: E402
from shared.events import utcnow  # noqa: E402
from shared.events.states import TaskState  # noqa: E402
from shared.leasing.work import BookChanges  # noqa: E402
from tests.unit.dispatcher.builders import a_node_record, a_task_record, finished  # noqa: E402

SCHEMA = "dispatcher"


@dataclass
class Timer:
    """Wall time per name and round (only while `on`)."""

    on: bool = False
    round: int = 0
    totals: dict[str, dict[int, float]] = field(default_factory=dict)

    def wrap(self, name: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                if self.on:
                    rounds = self.totals.setdefault(name, {})
                    rounds[self.round] = rounds.get(self.round, 0.0) + time.perf_counter() - started
        return timed


async def fleet(dc: Dispatcher, nodes: int) -> None:
    now = utcnow()
    records = {f"n{i:04d}": a_node_record(f"n{i:04d}", f"a{i:04d}", gpus=8, registered_at=now, last_seen=now)
               for i in range(nodes)}
    async with dc.write_step() as step:
        changes = BookChanges(nodes=records)
        step.write(changes, lambda conn, stored: save_changes(conn, dc.schema, dc.emitter, changes, stored))


async def arrive(dc: Dispatcher, round_: int, tasks: int) -> None:
    now = utcnow()
    records = {
        f"T{round_:03d}-{i:05d}": a_task_record(
            f"T{round_:03d}-{i:05d}", state=TaskState.QUEUED, run=0, queued_announced=False, submitted_at=now,
            updated_at=now, command=["python", "-c", "pass"], env={"BENCH": "1"}, labels={"bench": "writes"})
        for i in range(tasks)
    }
    async with dc.write_step() as step:
        changes = BookChanges(tasks=records)
        step.write(changes, lambda conn, stored: save_changes(conn, dc.schema, dc.emitter, changes, stored))


async def finish_all(dc: Dispatcher) -> None:
    assert dc.state is not None
    now = utcnow()
    reports = [finished(lease.agent_id, lease.lease_id, lease.task_id, lease.fencing_token)
               for lease in dc.state.leases.values() if lease.active]
    await report_handler.handle_reports(dc, [Arrived(report, now) for report in reports])


async def backend_cpu_s(pool: Any) -> float:
    """User + system CPU of every PostgreSQL backend process so far (from /proc)."""
    pids = [row["pid"] for row in await pool.fetch("SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL")]
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def run(args: argparse.Namespace, dsn: str) -> None:
    pool = await create_pool(dsn)
    timer = Timer()
    dispatch_loop.save_changes = timer.wrap("cycle save", dispatch_loop.save_changes)
    report_handler.save_report_effects = timer.wrap("reports save", report_handler.save_report_effects)
    Emitter.emit = timer.wrap("outbox", Emitter.emit)  # type: ignore[method-assign]  # inside the saves, if they call it
    cycle, handle = timer.wrap("cycle step", dispatch_loop.run_cycle), timer.wrap("reports step", finish_all)
    try:
        await migrate_delivery(pool, SCHEMA)
        await migrate(pool, SCHEMA, MIGRATIONS)
        epoch = await pool.fetchval(f"UPDATE {SCHEMA}.leader SET epoch = epoch + 1, holder = 'bench' WHERE id = 1"
                                    " RETURNING epoch")
        dc = Dispatcher(pool, SCHEMA, "dispatcher/bench", "service:dispatcher", DispatcherConfig(), epoch)
        await fleet(dc, args.nodes)
        cpu_before = process_before = 0.0
        for round_ in range(args.rounds):
            if round_ == 1:
                timer.on, cpu_before, process_before = True, await backend_cpu_s(pool), time.process_time()
            timer.round = round_
            dc.estimated_at = utcnow()  # the estimates every few seconds are not what is measured here
            await arrive(dc, round_, args.tasks)
            report = await cycle(dc)
            assert report.effects is not None and report.effects.leases == args.tasks, report
            await handle(dc)
        cpu, process = await backend_cpu_s(pool) - cpu_before, time.process_time() - process_before
        small = await small_steps(dc, pool, args.steps)
    finally:
        await pool.close()
    measured = (args.rounds - 1) * args.tasks
    print(f"{measured:,} tasks measured ({args.rounds - 1} rounds of {args.tasks}), {args.nodes} nodes;"
          f" load average after: {os.getloadavg()[0]:.2f}")
    print("  ms per task:   summed   best round")
    for name in ("cycle step", "cycle save", "reports step", "reports save", "outbox"):
        if name not in timer.totals:  # `Emitter.emit` (not called by a save that builds its events meanwhile)
            continue
        rounds = timer.totals[name].values()
        print(f"  {name:13} {sum(rounds) * 1000 / measured:6.3f}   {min(rounds) * 1000 / args.tasks:6.3f}")
    print(f"  PostgreSQL backends' CPU {cpu * 1000 / measured:6.3f} ms per task; this process {process * 1000 / measured:6.3f}")
    if args.steps:
        print(f"{args.steps} small write steps: {small.wall_ms:6.3f} ms each (wall), PostgreSQL backends' CPU"
              f" {small.backend_cpu_ms:6.3f} ms, this process {small.process_cpu_ms:6.3f} ms")


@dataclass(frozen=True)
class StepCost:
    wall_ms: float
    backend_cpu_ms: float
    process_cpu_ms: float


async def small_steps(dc: Dispatcher, pool: Any, steps: int) -> StepCost:
    """Time `steps` write steps that each update one node row: the fixed cost every step pays."""
    if not steps:
        return StepCost(0.0, 0.0, 0.0)
    cpu, process, started = await backend_cpu_s(pool), time.process_time(), time.perf_counter()
    for _ in range(steps):
        async with dc.write_step() as step:
            step.then(lambda conn: conn.execute(f"UPDATE {SCHEMA}.nodes SET last_seen = now() WHERE node_id = 'n0000'"))
    wall = time.perf_counter() - started
    cpu, process = await backend_cpu_s(pool) - cpu, time.process_time() - process
    return StepCost(wall * 1000 / steps, cpu * 1000 / steps, process * 1000 / steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--steps", type=int, default=1000, help="small write steps timed after the rounds (0: none)")
    run_on_embedded_postgres(run, parser.parse_args())


if __name__ == "__main__":
    main()
