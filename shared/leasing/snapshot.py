"""Pure builders of `plan()`'s inputs from the dispatcher's records: the `Snapshot` and the queue (the
quota accounts' promised GPU-seconds: `shared.leasing.promises`).

Times are aware datetimes in the records and float epoch seconds in the core; they are converted
at this boundary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime

from shared.leasing.promises import quota_accounts
from shared.leasing.records import LeaseRecord, NodeRecord, QuotaRecord, TaskRecord
from shared.scheduling.model import Node, PriorityClass, QueuedTask, RunningLease, Snapshot


def epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def build_snapshot(
    nodes: Iterable[NodeRecord], leases: Iterable[LeaseRecord], tasks: Mapping[str, TaskRecord],
    accounts: Iterable[QuotaRecord], now: float,
) -> Snapshot:
    """The fleet as `plan()` sees it: alive nodes that are not drained (`NodeRecord.takes_leases`)
    with the GPUs no active lease holds, the running leases, and each quota account's GPU-hours left.

    `leases` are the ACTIVE leases, `tasks` holds their tasks. A lease being preempted or revoked
    still holds its GPUs but is no longer a `RunningLease` (it cannot be preempted twice).
    """
    active = [(lease, tasks[lease.task_id]) for lease in leases]
    on_node: dict[str, list[LeaseRecord]] = defaultdict(list)
    for lease, _ in active:
        on_node[lease.node_id].append(lease)
    fleet = tuple(fleet_node(node, on_node[node.node_id], tasks)
                  for node in sorted(nodes, key=lambda n: n.node_id) if node.takes_leases)
    running = tuple(running_lease(lease, task) for lease, task in active if runs(lease))
    return Snapshot(nodes=fleet, leases=running, quotas=quota_accounts(accounts, active, now))


def fleet_node(node: NodeRecord, leases: Iterable[LeaseRecord], tasks: Mapping[str, TaskRecord]) -> Node:
    """The node as `plan()` sees it, given the ACTIVE leases on it: the GPUs none of them holds free, and
    how many of them are heavy (whether the node takes leases is the caller's to check)."""
    used: set[int] = set()
    heavy = 0
    for lease in leases:
        used.update(lease.gpu_indices)
        heavy += bool(tasks[lease.task_id].heavy)
    return Node(node_id=node.node_id, card_type=node.card_type, gpus=node.gpus,
                free=frozenset(range(node.gpus)) - used, heavy_running=heavy)


def runs(lease: LeaseRecord) -> bool:
    """True if the ACTIVE lease is a `RunningLease` for `plan()`: neither being preempted nor revoked."""
    return not lease.preempting and lease.revoke_reason is None


def running_lease(lease: LeaseRecord, task: TaskRecord) -> RunningLease:
    return RunningLease(
        lease_id=lease.lease_id, task_id=lease.task_id, project=task.project or "",
        priority_class=task.priority_class or PriorityClass.STANDARD, node_id=lease.node_id,
        card_type=lease.card_type, gpu_indices=lease.gpu_indices, started_at=lease.granted_at.timestamp(),
        estimated_end=lease.estimated_end.timestamp(), last_checkpoint_at=epoch(lease.last_checkpoint_at),
        heavy=bool(task.heavy), checkpoints_on_preempt=task.checkpoint_interval_s is not None,
        submitted_at=epoch(task.submitted_at), borrowed_headroom=lease.borrowed_headroom, priority=task.priority or 0,
    )


def build_queue(tasks: Iterable[TaskRecord], awaiting_preemption: frozenset[str] = frozenset()) -> list[QueuedTask]:
    """The queue for `plan()`: tasks in the queue, minus those whose victims are still being
    preempted (they sit this cycle out, or the next cycle would preempt more victims for them)."""
    return [task.queued_task() for task in tasks if task.in_queue and task.task_id not in awaiting_preemption]
