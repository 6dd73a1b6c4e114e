"""The dispatcher cycle, as a numbered recipe, and the loop that runs it.

    1. load the snapshot and the queue (one read-only transaction)      store.load_cycle_input
    2. decide: plan(snapshot, queue, policy, now) — pure, shared with the simulator
    3. persist leases, task states, events and commands (one transaction, epoch re-checked)
    4. the loop runs 1-3 when relevant events arrived (debounced) and on every tick; the tick
       first sweeps expired leases and silent nodes (sweep.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from services.dispatcher.context import Dispatcher
from services.dispatcher.persist import Persisted, persist_plan
from services.dispatcher.store import load_cycle_input
from services.dispatcher.sweep import sweep
from shared.events import utcnow
from shared.logging import get_logger
from shared.scheduling.plan import plan

log = get_logger(__name__)


@dataclass(frozen=True)
class CycleReport:
    queued: int
    persisted: Persisted
    plan_ms: float


async def run_cycle(dc: Dispatcher) -> CycleReport:
    """One scheduling cycle (steps 1-3)."""
    now, started = utcnow(), time.perf_counter()
    # 1. Load the snapshot and the queue in one read-only transaction.
    given = await load_cycle_input(dc.pool, dc.schema, now)
    if not given.queue:
        return CycleReport(0, Persisted(), 0.0)
    # 2. Decide: the pure core, the same function the simulator runs.
    loaded = time.perf_counter()
    decided = plan(given.snapshot, given.queue, dc.policy, now.timestamp())
    planned = time.perf_counter()
    plan_ms = (planned - loaded) * 1000
    # 3. Persist in one transaction, after re-checking that this instance is still the leader.
    persisted = await persist_plan(dc, given, decided, now)
    if persisted.leases or persisted.preempted:
        log.info("cycle", queued=len(given.queue), leases=persisted.leases, preempted=persisted.preempted,
                 held=persisted.held, load_ms=round((loaded - started) * 1000, 1), plan_ms=round(plan_ms, 1),
                 persist_ms=round((time.perf_counter() - planned) * 1000, 1))
    return CycleReport(len(given.queue), persisted, plan_ms)


async def cycle_loop(dc: Dispatcher, stop: asyncio.Event) -> None:
    """Step 4: run a cycle after relevant events (debounced) or at least every tick, until `stop`."""
    next_tick = 0.0
    while not stop.is_set():
        timeout = max(0.0, next_tick - time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(dc.wake.wait(), timeout=timeout)
        if stop.is_set():
            return
        if dc.wake.is_set():
            await asyncio.sleep(dc.config.debounce_s)  # let a burst of events land in one cycle
        dc.wake.clear()
        if time.monotonic() >= next_tick:
            next_tick = time.monotonic() + dc.config.tick_s
            await sweep(dc)
        await run_cycle(dc)
