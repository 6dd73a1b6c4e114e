"""Pure builders of `plan()`'s inputs from table rows: the `Snapshot` and the queue.

No I/O here: `store.load_cycle_input` reads the rows in one read-only transaction and hands them
over. Rows are mappings (asyncpg records or dicts) with the columns named below; times are aware
datetimes, converted to the core's float epoch seconds at this boundary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from shared.scheduling.model import (
    CardOption,
    Node,
    PriorityClass,
    QueuedTask,
    QuotaAccount,
    RunningLease,
    Snapshot,
)

Row = Mapping[str, Any]
_SECONDS_PER_HOUR = 3600.0


def epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def build_snapshot(
    nodes: Iterable[Row], leases: Sequence[Row], accounts: Iterable[Row], usage: Iterable[Row], now: float
) -> Snapshot:
    """The fleet as `plan()` sees it.

    nodes: alive nodes (node_id, card_type, gpus). leases: every ACTIVE lease (lease_id, task_id,
    node_id, card_type, gpu_indices, granted_at, estimated_end, last_checkpoint_at, preempting,
    revoke_reason, project, priority_class, heavy, checkpoint_interval_s). A lease being preempted or revoked still holds
    its GPUs but is no longer a `RunningLease` (it cannot be preempted twice).
    """
    used: dict[str, set[int]] = defaultdict(set)
    heavy: dict[str, int] = defaultdict(int)
    for lease in leases:
        used[lease["node_id"]].update(lease["gpu_indices"])
        heavy[lease["node_id"]] += bool(lease["heavy"])
    fleet = tuple(
        Node(
            node_id=row["node_id"], card_type=row["card_type"], gpus=row["gpus"],
            free=frozenset(range(row["gpus"])) - used[row["node_id"]], heavy_running=heavy[row["node_id"]],
        )
        for row in nodes
    )
    running = tuple(running_lease(row) for row in leases if not row["preempting"] and row["revoke_reason"] is None)
    return Snapshot(nodes=fleet, leases=running, quotas=quota_accounts(accounts, usage, leases, now))


def running_lease(row: Row) -> RunningLease:
    return RunningLease(
        lease_id=row["lease_id"], task_id=row["task_id"], project=row["project"],
        priority_class=PriorityClass(row["priority_class"]), node_id=row["node_id"], card_type=row["card_type"],
        gpu_indices=tuple(row["gpu_indices"]), started_at=row["granted_at"].timestamp(),
        estimated_end=row["estimated_end"].timestamp(), last_checkpoint_at=epoch(row["last_checkpoint_at"]),
        heavy=bool(row["heavy"]), checkpoints_on_preempt=row.get("checkpoint_interval_s") is not None,
    )


def quota_accounts(
    accounts: Iterable[Row], usage: Iterable[Row], leases: Iterable[Row], now: float
) -> dict[str, QuotaAccount]:
    """One `QuotaAccount` per project with an account: what is left after recorded usage and after
    the rest of the estimates of its running leases (already promised, not yet recorded)."""
    granted: dict[str, list[Row]] = defaultdict(list)
    for row in accounts:
        granted[row["project"]].append(row)
    used_s = {row["project"]: row["gpu_seconds"] for row in usage}
    promised_s: dict[str, float] = defaultdict(float)
    for lease in leases:
        promised_s[lease["project"]] += len(lease["gpu_indices"]) * max(0.0, lease["estimated_end"].timestamp() - now)
    return {
        project: QuotaAccount(
            project=project,
            remaining_gpu_hours=sum(r["gpu_hours"] for r in rows)
            - (used_s.get(project, 0.0) + promised_s[project]) / _SECONDS_PER_HOUR,
            valid_from=min(r["valid_from"].timestamp() for r in rows),
            valid_to=max(r["valid_to"].timestamp() for r in rows),
        )
        for project, rows in granted.items()
    }


def card_options(options: Sequence[Sequence[Any]] | None) -> tuple[CardOption, ...]:
    """`[[card_type, runtime_s, cost], ...]` (as stored from `task.matched`) -> `CardOption`s."""
    return tuple(CardOption(card_type=c, runtime_s=float(r), cost=float(k)) for c, r, k in options or ())


def queued_task(row: Row) -> QueuedTask:
    """A task row whose facets are complete -> the core's `QueuedTask`."""
    return QueuedTask(
        task_id=row["task_id"], project=row["project"], priority_class=PriorityClass(row["priority_class"]),
        priority=row["priority"], gpus=row["gpus"], submitted_at=row["submitted_at"].timestamp(),
        options=card_options(row["options"]) if row["matched"] else (), data_ready=bool(row["data_ready"]),
        heavy=bool(row["heavy"]), checkpoint_interval_s=row["checkpoint_interval_s"],
    )


def build_queue(rows: Iterable[Row], awaiting_preemption: frozenset[str] = frozenset()) -> list[QueuedTask]:
    """The queue for `plan()`; tasks whose victims are still being preempted sit this cycle out
    (otherwise the next cycle would preempt more victims for the same task)."""
    return [queued_task(row) for row in rows if row["task_id"] not in awaiting_preemption]
