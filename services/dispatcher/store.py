"""Reads of the dispatcher's tables for one cycle: the snapshot rows and the queue, in ONE
read-only transaction (a consistent view), turned into `plan()` inputs by `snapshot.py`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from shared.leasing.snapshot import Row, build_queue, build_snapshot
from shared.delivery.db import quote_schema
from shared.scheduling.model import QueuedTask, Snapshot

TASK_COLUMNS = (
    "task_id, project, priority_class, priority, gpus, heavy, checkpoint_interval_s, submitted_at, options,"
    " matched, data_ready, state, queued_announced, deferral_reason, updated_at"
)


@dataclass(frozen=True)
class CycleInput:
    """What one cycle decides over, and the rows the persist step needs again."""

    snapshot: Snapshot
    queue: list[QueuedTask]
    tasks: dict[str, Row]  # queued task rows by id
    nodes: dict[str, Row]  # alive node rows by id


async def load_cycle_input(pool: asyncpg.Pool, schema: str, now: datetime) -> CycleInput:
    """Step 1 of the cycle: alive nodes, active leases, quotas, usage and the queue, one snapshot."""
    s = quote_schema(schema)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        nodes = await conn.fetch(f"SELECT node_id, agent_id, card_type, gpus FROM {s}.nodes WHERE alive ORDER BY node_id")
        leases = await conn.fetch(
            f"SELECT l.lease_id, l.task_id, l.node_id, l.card_type, l.gpu_indices, l.granted_at, l.estimated_end,"
            f" l.last_checkpoint_at, l.preempting, l.preempted_for, l.revoke_reason, t.project, t.priority_class, t.heavy,"
            f" t.checkpoint_interval_s"
            f" FROM {s}.leases l JOIN {s}.tasks t USING (task_id) WHERE l.state = 'active'"
        )
        accounts = await conn.fetch(f"SELECT project, gpu_hours, valid_from, valid_to FROM {s}.quota_accounts")
        usage = await conn.fetch(f"SELECT project, gpu_seconds FROM {s}.project_usage")
        tasks = await conn.fetch(
            f"SELECT {TASK_COLUMNS} FROM {s}.tasks WHERE complete AND state IN ('queued', 'held')"
            " AND NOT cancel_requested"
        )
    awaiting = frozenset(row["preempted_for"] for row in leases if row["preempting"] and row["preempted_for"])
    return CycleInput(
        snapshot=build_snapshot(nodes, leases, accounts, usage, now.timestamp()),
        queue=build_queue(tasks, awaiting),
        tasks={row["task_id"]: row for row in tasks},
        nodes={row["node_id"]: row for row in nodes},
    )


