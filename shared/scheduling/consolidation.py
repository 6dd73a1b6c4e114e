"""Consolidation (`Policy.holder_consolidates`): the reservation's holder takes a node whose work can move now.

A wide task holding the cycle's reservation may wait hours for a node to empty while as many GPUs as it needs sit free
across other nodes, and no waiting task is narrow enough for them (docs/BENCHMARKS.md, policy session 22: in the
core-heavy cells where 80% of tasks checkpoint, most idle GPU-time past the headroom's). After the walk, over the
plan as made, a node is consolidated for the holder when all of these hold — each is what makes the move cost no more
than checkpoint writes:

- the holder is not opportunistic, not heavy, fits one node, is past its preemption grace, and its reservation
  starts at least `Policy.consolidate_after_s` from now (a drain that ends sooner is left to end by itself);
- every lease on the node is not core, checkpoints on preemption (it loses only its write, `lost_gpu_hours`), is not
  heavy and is its task's only lease; the node's free GPUs plus theirs hold the holder (its free GPUs alone do not);
- every such lease fits now on the card type's other nodes' free GPUs (best fit, widest first), so each requeued
  task can restart at once; where the holder or a moved task is standard, the card type's free GPUs less the holder's
  stay at or above the headroom kept (the moved tasks only change nodes: the holder's GPUs are what the fleet loses);
- of such nodes, the one that moves the fewest GPUs, then loses the least, then ranks first.

The node's leases are preempted for the holder (`Preemption`), which then waits AWAITING_PREEMPTION instead of
holding its reservation: the next plan, once they have checkpointed, finds the node free. Pure: reads the snapshot,
the ordered queue and the plan only. Off in every preset (measured: docs/BENCHMARKS.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

from shared.scheduling import reasons
from shared.scheduling.headroom import core_demand, headroom_gpus
from shared.scheduling.model import (
    DeferralReason,
    Deferrals,
    Plan,
    Preemption,
    PriorityClass,
    QueuedTask,
    Reservation,
    RunningLease,
    Snapshot,
)
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.preemption import lost_gpu_hours


def consolidate(snapshot: Snapshot, queue: Iterable[QueuedTask], decided: Plan, policy: Policy, now: float) -> Plan:
    """`decided`, with the holder's node consolidated where the module's conditions hold (else unchanged)."""
    holder = _holder(queue, decided, policy, now)
    if holder is None:
        return decided
    task, reservation = holder
    node_ids = {node.node_id for node in snapshot.nodes if node.card_type == reservation.card_type}
    free = _free_after(snapshot, decided, node_ids)
    if task.gpus > max((node.gpus for node in snapshot.nodes if node.node_id in node_ids), default=0):
        return decided
    victims = _cheapest_node(snapshot, decided, free, task.gpus, now)
    if victims is None:
        return decided
    standard = [work.priority_class == PriorityClass.STANDARD for work in (task, *victims)]
    if any(standard) and sum(free.values()) - task.gpus < _headroom_kept(snapshot, queue, policy, reservation.card_type):
        return decided  # standard work would eat the headroom: the holder (standard), or a moved task at its restart
    return _preempting(decided, task, reservation, victims, now)


def _holder(queue: Iterable[QueuedTask], decided: Plan, policy: Policy,
            now: float) -> tuple[QueuedTask, Reservation] | None:
    """The reservation's holder and its reservation, if the holder may consolidate (module docstring)."""
    if not (policy.holder_consolidates and policy.preemption and decided.reservations):
        return None
    reservation = decided.reservations[0]
    if reservation.start_at - now < policy.consolidate_after_s:
        return None
    task = next((task for task in queue if task.task_id == reservation.task_id), None)
    if task is None or task.priority_class == PriorityClass.OPPORTUNISTIC or task.heavy:
        return None
    if now < task.submitted_at + policy.preempt_after_s:
        return None
    return task, reservation


def _free_after(snapshot: Snapshot, decided: Plan, node_ids: set[str]) -> dict[str, int]:
    """Free GPUs per node of `node_ids` once the plan's grants have taken theirs."""
    free = {node.node_id: len(node.free) for node in snapshot.nodes if node.node_id in node_ids}
    for grant in decided.grants:
        for placement in grant.placements:
            if placement.node_id in free:
                free[placement.node_id] -= len(placement.gpu_indices)
    return free


def _headroom_kept(snapshot: Snapshot, queue: Iterable[QueuedTask], policy: Policy, card_type: str) -> int:
    card_of_node = {node.node_id: node.card_type for node in snapshot.nodes}
    total = sum(node.gpus for node in snapshot.nodes if node.card_type == card_type)
    return headroom_gpus(policy, card_type, total, core_demand(snapshot.leases, queue, card_of_node).get(card_type, 0))


def _cheapest_node(snapshot: Snapshot, decided: Plan, free: dict[str, int], gpus: int,
                   now: float) -> list[RunningLease] | None:
    """The leases of the node that holds `gpus` once they move, movable now, moving the fewest GPUs; None if none."""
    preempted = {preemption.lease_id for preemption in decided.preemptions}
    leases_of_task = Counter(lease.task_id for lease in snapshot.leases)
    on_node: dict[str, list[RunningLease]] = {}
    for lease in snapshot.leases:
        if lease.node_id in free:
            on_node.setdefault(lease.node_id, []).append(lease)
    best: tuple[tuple[int, float, str], list[RunningLease]] | None = None
    for node_id, leases in on_node.items():
        if free[node_id] >= gpus or not all(_movable(lease, leases_of_task, preempted) for lease in leases):
            continue
        moved = sum(lease.gpus for lease in leases)
        if free[node_id] + moved < gpus:
            continue
        if not fits_elsewhere([lease.gpus for lease in leases], [count for other, count in free.items() if other != node_id]):
            continue
        key = (moved, sum(lost_gpu_hours(lease, now) for lease in leases), node_id)
        if best is None or key < best[0]:
            best = (key, leases)
    return None if best is None else sorted(best[1], key=lambda lease: lease.lease_id)


def _movable(lease: RunningLease, leases_of_task: Counter, preempted: set[str]) -> bool:
    """A lease that loses only its write and restarts in a hole of its own width: not core, checkpoints, not heavy,
    its task's only lease, not preempted by the plan already."""
    return (lease.priority_class != PriorityClass.CORE and lease.checkpoints_on_preempt and not lease.heavy
            and leases_of_task[lease.task_id] == 1 and lease.lease_id not in preempted)


def fits_elsewhere(widths: Sequence[int], free: Sequence[int]) -> bool:
    """True if tasks of these widths all fit the free GPUs of these nodes at once (best fit, widest first)."""
    room = sorted(free)
    for width in sorted(widths, reverse=True):
        index = next((i for i, count in enumerate(room) if count >= width), None)
        if index is None:
            return False
        room[index] -= width
        room.sort()
    return True


def _preempting(decided: Plan, task: QueuedTask, reservation: Reservation, victims: list[RunningLease],
                now: float) -> Plan:
    """The plan with the victims preempted for the holder, which waits for them instead of its reservation."""
    node_ids = sorted({lease.node_id for lease in victims})
    detail = reasons.consolidating(len(victims), task.gpus, reservation.card_type, node_ids)
    columns = decided.deferrals
    position = columns.task_ids.index(task.task_id)
    deferrals = Deferrals(columns.task_ids,
                          (*columns.reasons[:position], DeferralReason.AWAITING_PREEMPTION, *columns.reasons[position + 1:]),
                          (*columns.details[:position], detail, *columns.details[position + 1:]))
    preemptions = tuple(Preemption(lease.lease_id, lease.task_id, task.task_id, lost_gpu_hours(lease, now))
                        for lease in victims)
    return replace(decided, preemptions=decided.preemptions + preemptions,
                   reservations=tuple(r for r in decided.reservations if r is not reservation), deferrals=deferrals)
