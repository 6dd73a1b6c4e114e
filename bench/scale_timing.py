"""The scale benchmark's timings: a case's first `plan()` three ways (`time_plan`), the steady cycles that follow it
(`next_cycle`, `steady_cycles`) and the digest of every decision they make (`plans_digest`).

Only `plan()` is timed (best of several runs, after one warm-up), as CPU time of the process (`CLOCK`); building
the inputs is not, except as `kept_build_ms`.
"""

from __future__ import annotations

import hashlib
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_inputs import (  # noqa: E402
    CHURN,
    CLOCK,
    CYCLE_S,
    NOW,
    TIMED_CYCLES,
    WARM_CYCLES,
    Case,
    build_queue,
    inputs_of,
    kept_inputs,
)
from shared.scheduling.cycle import Cycle  # noqa: E402
from shared.scheduling.kept_snapshot import KeptSnapshot  # noqa: E402
from shared.scheduling.model import Plan, QueuedTask, RunningLease, Snapshot  # noqa: E402
from shared.scheduling.ordered_queue import OrderedQueue  # noqa: E402
from shared.scheduling.ordering import order_queue  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402


@dataclass(frozen=True)
class FirstPlans:
    """A case's first plan() timed three ways (ms, best of the repeats; the module docstring says why)."""

    kept_ms: float  # over the queue as an `OrderedQueue` and the fleet as a `KeptSnapshot`, made beforehand
    list_ms: float  # over the tasks in a list and a plain `Snapshot` (the queue sorted afresh)
    kept_build_ms: float  # `OrderedQueue.of` + `KeptSnapshot.of` of those inputs
    granted: int
    fillers: int = 0  # of the grants, standard work on headroom GPUs (`Grant.borrowed_headroom`)


def time_plan(case: Case, repeats: int = 5) -> FirstPlans:
    """Best-of-`repeats` milliseconds of the case's first plan() over kept inputs and over a list, of making the
    kept inputs, and how many tasks the plan granted."""
    snapshot, queue = inputs_of(case.nodes, case.queue)
    policy = POLICIES[case.policy]
    kept_queue, kept_snapshot = kept_inputs(snapshot, queue, policy)  # warm-up
    result = plan(kept_snapshot, kept_queue, policy, NOW)  # warm-up
    plan(snapshot, queue, policy, NOW)  # warm-up
    kept_ms = min(_timed(kept_snapshot, kept_queue, policy) for _ in range(repeats))
    list_ms = min(_timed(snapshot, queue, policy) for _ in range(repeats))
    del kept_queue, kept_snapshot
    build_ms = min(_timed_build(snapshot, queue, policy) for _ in range(repeats))
    return FirstPlans(kept_ms, list_ms, build_ms, len(result.grants), fillers_of(result))


def fillers_of(decided: Plan) -> int:
    """How many of the plan's grants are standard fillers of the burst headroom (`Grant.borrowed_headroom`)."""
    return sum(grant.borrowed_headroom for grant in decided.grants)


def _timed(snapshot: Snapshot, queue, policy) -> float:
    started = CLOCK()
    plan(snapshot, queue, policy, NOW)
    return (CLOCK() - started) * 1000


def _timed_build(snapshot: Snapshot, queue: list[QueuedTask], policy) -> float:
    started = CLOCK()
    made = kept_inputs(snapshot, queue, policy)
    millis = (CLOCK() - started) * 1000
    del made
    return millis


def next_cycle(snapshot: Snapshot, kept: OrderedQueue, decided: Plan, now: float, cycle: int,
               rng: random.Random) -> tuple[Snapshot, OrderedQueue, float, float]:
    """The inputs of the cycle after `decided`: its grants run (their tasks leave the queue, their GPUs
    are leased), its preemption victims and CHURN other running leases end, CHURN tasks arrive, CYCLE_S
    seconds later. The kept queue is updated from these changes alone (`OrderedQueue.changed`), and so is a
    kept snapshot (`KeptSnapshot.changed`; a plain one is made anew); the last value returned is how many ms
    the updates of the kept inputs took."""
    nodes = {node.node_id: node for node in snapshot.nodes}
    touched: set[str] = set()
    queued = {grant.task_id for grant in decided.grants}
    granted = [task for task in kept if task.task_id in queued]
    victims = {preemption.lease_id for preemption in decided.preemptions}
    running = [lease for lease in snapshot.leases if lease.lease_id not in victims]
    ending = victims | {lease.lease_id for lease in rng.sample(running, min(CHURN, len(running)))}
    kept_leases = []
    for lease in snapshot.leases:
        if lease.lease_id in ending:
            node = nodes[lease.node_id]
            nodes[lease.node_id] = replace(node, free=node.free | set(lease.gpu_indices),
                                           heavy_running=node.heavy_running - lease.heavy)
            touched.add(lease.node_id)
        else:
            kept_leases.append(lease)
    by_id = {task.task_id: task for task in granted}
    for grant in decided.grants:
        task = by_id[grant.task_id]
        for placement in grant.placements:
            node = nodes[placement.node_id]
            nodes[placement.node_id] = replace(node, free=node.free - set(placement.gpu_indices),
                                               heavy_running=node.heavy_running + task.heavy)
            touched.add(placement.node_id)
            kept_leases.append(RunningLease(
                f"lease-{task.task_id}-{placement.node_id}", task.task_id, task.project, task.priority_class,
                placement.node_id, grant.card_type, placement.gpu_indices, now, grant.estimated_end, heavy=task.heavy,
                checkpoints_on_preempt=task.checkpoint_interval_s is not None,  # as the dispatcher's leases say
                borrowed_headroom=grant.borrowed_headroom))  # a filler's lease borrows the headroom, as the dispatcher's does
    later = now + CYCLE_S
    arrivals = build_queue(CHURN, rng, later, prefix=f"arrival-{cycle}", waited_s=CYCLE_S)
    started = CLOCK()
    if isinstance(snapshot, KeptSnapshot):
        started_leases = kept_leases[len(kept_leases) - sum(len(grant.placements) for grant in decided.grants):]
        fleet = snapshot.changed([nodes[node_id] for node_id in sorted(touched)], started_leases, sorted(ending))
    else:
        fleet = Snapshot(tuple(nodes[node.node_id] for node in snapshot.nodes), tuple(kept_leases), snapshot.quotas)
    updated = kept.changed(arrivals, granted)
    return fleet, updated, later, (CLOCK() - started) * 1000


@dataclass(frozen=True)
class SteadyCycle:
    kept_ms: float  # plan() of the kept queue (`OrderedQueue`) and snapshot (`KeptSnapshot`)
    update_ms: float  # updating them before it (`OrderedQueue.changed`, `KeptSnapshot.changed`)
    fresh_ms: float  # plan() of the same tasks in a list (sorted afresh) and of a plain `Snapshot`
    granted: int
    full_walk: bool  # a GPU was still free after the walk: every task took the per-task path
    fillers: int = 0  # of the grants, standard fillers of the burst headroom (`fillers_of`)


def steady_cycles(snapshot: Snapshot, queue: list[QueuedTask], policy_name: str = "cardflow",
                  warm: int = WARM_CYCLES, timed: int = TIMED_CYCLES, repeats: int = 3) -> list[SteadyCycle]:
    """Plan cycle after cycle with the queue kept sorted and the snapshot kept (`next_cycle` makes each cycle's
    inputs) and time the `timed` cycles after `warm` ones, each as best of `repeats`, with the kept inputs and
    with the same tasks in a list and a plain snapshot."""
    policy, rng, now = POLICIES[policy_name], random.Random("steady"), NOW
    kept, snapshot = OrderedQueue.of(queue, policy), KeptSnapshot.of(snapshot)
    decided = plan(snapshot, kept, policy, now)
    rows = []
    for cycle in range(warm + timed):
        snapshot, kept, now, update_ms = next_cycle(snapshot, kept, decided, now, cycle, rng)
        decided = plan(snapshot, kept, policy, now)
        if cycle >= warm:
            listed, plain = list(kept), _plain(snapshot)
            kept_ms = min(_timed_at(snapshot, kept, policy, now) for _ in range(repeats))
            fresh_ms = min(_timed_at(plain, listed, policy, now) for _ in range(repeats))
            rows.append(SteadyCycle(kept_ms, update_ms, fresh_ms, len(decided.grants),
                                    _walked_everything(snapshot, kept, policy, now), fillers_of(decided)))
    return rows


def plans_digest(snapshot: Snapshot, queue: list[QueuedTask], policy_name: str = "cardflow",
                 cycles: int = WARM_CYCLES + TIMED_CYCLES) -> str:
    """A sha256 of every decision of the cold plan and of `cycles` steady cycles (as `steady_cycles` makes
    them), each planned over the kept queue and snapshot and over the same tasks in a list and a plain snapshot:
    grants, preemptions,
    reservations, revisit time and every deferral's id, reason and sentence. Equal digests from two
    checkouts: they decide these cycles alike (the check behind "same plans" in docs/scheduling.md)."""
    policy, rng, now = POLICIES[policy_name], random.Random("steady"), NOW
    digest = hashlib.sha256()

    def add(decided: Plan) -> None:
        deferrals = decided.deferrals
        for part in (decided.grants, decided.preemptions, decided.reservations, decided.revisit_at,
                     deferrals.task_ids, tuple(map(str, deferrals.reasons)), deferrals.details):
            digest.update(repr(part).encode())

    add(plan(snapshot, queue, policy, now))
    kept, snapshot = OrderedQueue.of(queue, policy), KeptSnapshot.of(snapshot)
    decided = plan(snapshot, kept, policy, now)
    for cycle in range(cycles):
        snapshot, kept, now, _ = next_cycle(snapshot, kept, decided, now, cycle, rng)
        decided = plan(snapshot, kept, policy, now)
        add(decided)
        add(plan(_plain(snapshot), list(kept), policy, now))
    return digest.hexdigest()


def _plain(snapshot: Snapshot) -> Snapshot:
    """The same nodes, leases and quotas as a plain `Snapshot` (nothing kept beside)."""
    return Snapshot(tuple(snapshot.nodes), tuple(snapshot.leases), snapshot.quotas)


def _walked_everything(snapshot: Snapshot, queue, policy, now: float) -> bool:
    ordered = order_queue(queue, policy, now)
    cycle = Cycle(snapshot, policy, now, ordered)
    cycle.walk(ordered)
    return cycle.fleet.free_total > 0


def _timed_at(snapshot: Snapshot, queue, policy, now: float) -> float:
    started = CLOCK()
    plan(snapshot, queue, policy, now)
    return (CLOCK() - started) * 1000

