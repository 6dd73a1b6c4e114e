"""The dispatcher's cycle, as a numbered recipe, the tick's sweep, and the loop that runs them.

    1. snapshot + queue from the working set (memory: no reads)          WorkingSet.snapshot / kept_queue
       tasks the policy's approval rules match wait unapproved until a reviewer approves them
    2. decide: plan(snapshot, queue, policy, now) — pure, shared with the simulator; before it the
       governance gate (approvals, deadline holds), after it their sentences (governance.py)
    3. fold: apply_plan re-validates and turns the plan into records and events (pure), each grant
       with why it started now; every estimate_every_s the queue's estimated starts and the watches
       (deadlines at risk, core work near its quota's expiry, approvals waiting too long)
    4. memory takes the changes over; the save runs in the step's transaction (epoch checked) once the
       step before has committed — with `steps_in_flight` > 1 after the step lock, so the next step
       decides while this one writes (`context` module docstring)
    5. the loop runs 1-4 when relevant events arrived (at most once per debounce_s after a cycle that left
       tasks waiting, at once after one that left none) and on every tick; the tick
       first probes Redis (`Dispatcher.watch_redis`), then sweeps expired leases and silent nodes
       (`shared.leasing.expiry.expire`, which knows the report path's outages)

While Redis is known unreachable no cycle runs: its grants could not reach the agents.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from services.dispatcher.context import Dispatcher
from services.dispatcher.governance import gate, govern, watch_queue
from services.dispatcher.store import fresh_leases, save_changes, save_queue_estimates
from services.observability.metrics import observe_cycle
from shared.event_wait import wait_until_set
from shared.events import utcnow
from shared.leasing.expiry import expire
from shared.leasing.outage import OutageSource
from shared.leasing.plan_effects import CycleEffects, apply_plan, leases_needed
from shared.leasing.queue_order import start_reasons
from shared.leasing.records import LeaseBook, TaskRecord
from shared.logging import get_logger
from shared.scheduling.estimate import StartEstimate
from shared.scheduling.ordering import order_queue
from shared.scheduling.plan import plan

log = get_logger(__name__)


@dataclass(frozen=True)
class CycleReport:
    queued: int
    effects: CycleEffects | None
    plan_ms: float
    waiting: int = 0  # tasks still queued after the cycle (not granted: no capacity, held, gated)


async def run_cycle(dc: Dispatcher, *, skip_if_idle: bool = False) -> CycleReport:
    """One scheduling cycle (steps 1-4). `skip_if_idle`: with nothing to plan or estimate, take no
    step at all (no write lock, no transaction); the tick's cycles never skip (they also load a newer
    `policy` version)."""
    entered = time.perf_counter()
    if dc.outages.is_down(OutageSource.REDIS):
        return CycleReport(0, None, 0.0)
    if skip_if_idle and dc.state is not None and not dc.state.plan_queue() and not dc.estimates_due(utcnow(), mark=False):
        return CycleReport(0, None, 0.0)
    async with dc.write_step(urgent=True) as step:  # before waiting batches: it turns the queue into grants
        started = time.perf_counter()
        # 1. The snapshot and the queue, from memory (and a newer `policy` version, if one came into force).
        await dc.policies.refresh(step.conn)
        queue = step.state.kept_queue(dc.policy)  # kept sorted between cycles (`OrderedQueue`)
        if not queue:
            if dc.estimates_due(step.now):
                step.then(lambda conn: save_queue_estimates(conn, dc.schema, {}, {}, step.now))
            observe_cycle(started - entered)
            return CycleReport(0, None, 0.0)
        now_s = step.now.timestamp()
        snapshot = step.state.snapshot(now_s)
        # 2. Decide: the pure core, the same function the simulator runs — after the governance gate
        #    (tasks that need a reviewer wait for one; deadline holds if the policy wants them).
        gated, held = gate(dc, step.state, queue, now_s)
        decided = govern(dc, plan(snapshot, queue.with_tasks(gated), dc.policy, now_s), gated, held)
        planned = time.perf_counter()
        # 3. Fold the plan over the records: re-validated, with fresh lease ids and fencing tokens, and
        #    each grant's reason to start now (backfill, reservation, preemption).
        ordered = order_queue(queue, dc.policy, now_s)
        fresh = iter(await fresh_leases(step.conn, dc.schema, leases_needed(decided)))
        reasons = start_reasons(decided, ordered, step.state.flags_of)
        effects = apply_plan(step.state.book(), decided, step.now, dc.rules, fresh, dc.policy_version, reasons)
        changes = effects.changes
        #    Every few seconds: the estimated starts and the watches over them (deadlines, quotas, approvals).
        estimates = None
        if dc.estimates_due(step.now):
            estimates, watched = watch_queue(dc, step.state.book(tasks=changes.tasks), snapshot, ordered, decided,
                                             now_s, step.now)
            changes = changes.merge(watched)
        folded = time.perf_counter()
        # 4. Memory takes the changes over now; the save runs once the step before has committed.
        marks: dict[str, float] = {}
        flagged = _tasks_estimated(estimates, step.state.book(tasks=changes.tasks).tasks)

        async def save(conn: asyncpg.Connection, stored: LeaseBook | None) -> None:
            marks["saving"] = time.perf_counter()
            await save_changes(conn, dc.schema, dc.emitter, changes, stored)
            if estimates is not None:
                await save_queue_estimates(conn, dc.schema, estimates, flagged, step.now)
            marks["saved"] = time.perf_counter()

        step.write(changes, save, read=step.state.book())
    ended = time.perf_counter()
    waiting = len(dc.state.queue) if dc.state is not None else 0  # the queue in memory, grants taken out
    observe_cycle(started - entered, planned - started, ended - planned)  # Prometheus histogram
    if effects.leases or effects.preempted:
        log.info("cycle", queued=len(queue), leases=effects.leases, preempted=effects.preempted, held=effects.held,
                 plan_ms=_ms(started, planned), fold_ms=_ms(planned, folded), wait_ms=_ms(folded, marks["saving"]),
                 save_ms=_ms(marks["saving"], marks["saved"]), commit_ms=_ms(marks["saved"], ended))  # fmt: skip
    return CycleReport(len(queue), effects, (planned - started) * 1000, waiting)


def _tasks_estimated(estimates: Mapping[str, StartEstimate] | None, tasks: Mapping[str, TaskRecord]) -> dict[str, TaskRecord]:
    """The records of the tasks `estimates` covers, as they are now (their flags go with the estimates)."""
    if estimates is None:
        return {}
    return {e.task_id: tasks[e.task_id] for e in estimates.values() if e.task_id in tasks}


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 1)


async def sweep(dc: Dispatcher) -> int:
    """Expire overdue leases and mark silent nodes lost; return how many records changed."""
    async with dc.write_step() as step:
        book = step.state.book()
        changes = expire(book, step.now, dc.rules, dc.outages.current())
        if not changes:
            return 0
        step.write(changes, lambda conn, stored: save_changes(conn, dc.schema, dc.emitter, changes, stored), read=book)
    expired = sorted(i for i, lease in changes.leases.items() if not lease.active)
    lost = sorted(i for i, node in changes.nodes.items() if not node.alive)
    if expired or lost:
        log.info("sweep", expired=expired, lost=lost)
        dc.request_cycle()
    return len(changes.leases) + len(changes.nodes)


async def cycle_loop(dc: Dispatcher, stop: asyncio.Event) -> None:
    """Step 5: run a cycle when relevant events arrived, at most once per `debounce_s` after a cycle
    that left tasks waiting (a burst of events then lands in one replan of the backlog), at once after
    one that left none (the next cycle plans only what arrived since: a task on a fleet with room is
    planned as soon as its last facet arrives, whatever woke the cycles before it: the previous task's
    facets, its own first facet, a finished report, the tick), and at least every tick, until `stop`."""
    next_tick, last_cycle = 0.0, -math.inf
    while not stop.is_set():
        timeout = max(0.0, next_tick - time.monotonic())
        await wait_until_set(dc.wake, timeout)
        if stop.is_set():
            return
        too_soon_s = last_cycle + dc.config.debounce_s - time.monotonic()
        if dc.wake.is_set() and too_soon_s > 0:
            await asyncio.sleep(too_soon_s)  # the previous cycle was a moment ago: let this burst gather
        dc.wake.clear()
        ticked = time.monotonic() >= next_tick
        if ticked:
            next_tick = time.monotonic() + dc.config.tick_s
            await dc.watch_redis()
            await sweep(dc)
        started = time.monotonic()
        # Only a backlog is worth gathering a burst for: a cycle that granted or emptied its whole
        # queue leaves the next one nothing to replan but the new arrivals.
        last_cycle = started if (await run_cycle(dc, skip_if_idle=not ticked)).waiting else -math.inf
