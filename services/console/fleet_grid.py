"""The fleet as a grid: one row per node, one cell per GPU, with what holds it and how busy it is.

    grid = await load_fleet_grid(pool, now)    # {"nodes": [{node_id, card_type, alive, gpus: [cell...]}], ...}

A cell's `status` is a `GpuStatus`: the priority class of the task leasing it, `idle`, `reclaimed`
(its last lease was taken back for idleness within `RECLAIMED_RECENTLY`, and nothing holds it
since) or `lost` (the node stopped heartbeating). A node an operator drained (`drained`, with who and
why) takes no new leases; its cells still say what holds each GPU. `util_pct` is the GPU's last reported
utilisation (the dispatcher's `gpu_utilisation`, read-only), None when never reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import asyncpg

from services.console.store import SCHEMA as VIEWS
from services.console.views import MISSING_TABLES

DISPATCHER_SCHEMA = "dispatcher"
RECLAIMED_RECENTLY = timedelta(hours=1)


class GpuStatus(StrEnum):
    CORE = "core"
    STANDARD = "standard"
    OPPORTUNISTIC = "opportunistic"
    IDLE = "idle"
    RECLAIMED = "reclaimed"
    LOST = "lost"


_CLASSES = frozenset({GpuStatus.CORE.value, GpuStatus.STANDARD.value, GpuStatus.OPPORTUNISTIC.value})


@dataclass(frozen=True, slots=True)
class GpuCell:
    index: int
    status: GpuStatus
    task_id: str | None = None
    task_name: str | None = None
    util_pct: float | None = None


async def load_fleet_grid(pool: asyncpg.Pool, now: datetime) -> dict[str, Any]:
    """Every node ever registered (online first) with one cell per GPU, and counts per status."""
    try:
        nodes = await pool.fetch(
            f"SELECT node_id, card_type, gpus, alive, mode, drained, drained_by, drain_reason FROM {VIEWS}.nodes"
            " ORDER BY alive DESC, card_type, node_id"
        )
        held = await pool.fetch(
            f"SELECT l.node_id, g AS gpu, l.task_id, t.name, t.view->>'priority_class' AS priority_class"
            f" FROM {VIEWS}.leases l CROSS JOIN unnest(l.gpu_indices) AS g LEFT JOIN {VIEWS}.tasks t ON t.id = l.task_id"
            f" WHERE l.ended_at IS NULL"
        )
        reclaimed = await pool.fetch(
            f"SELECT l.node_id, g AS gpu FROM {VIEWS}.leases l CROSS JOIN unnest(l.gpu_indices) AS g"
            f" WHERE l.end_reason = 'reclaimed_idle' AND l.ended_at > $1",
            now - RECLAIMED_RECENTLY,
        )
    except MISSING_TABLES:
        return {"nodes": [], "counts": {}}
    util = await _load_utilisation(pool)
    holders = {(r["node_id"], r["gpu"]): r for r in held}
    reclaimed_gpus = {(r["node_id"], r["gpu"]) for r in reclaimed}
    rows = []
    for node in nodes:
        cells = [_cell(node, index, holders, reclaimed_gpus, util) for index in range(node["gpus"])]
        rows.append({"node_id": node["node_id"], "card_type": node["card_type"], "alive": node["alive"],
                     "mode": node["mode"], "drained": node["drained"], "drained_by": node["drained_by"],
                     "drain_reason": node["drain_reason"], "gpus": [asdict(cell) for cell in cells]})  # fmt: skip
    counts: dict[str, int] = {status.value: 0 for status in GpuStatus}
    for row in rows:
        for cell in row["gpus"]:
            counts[cell["status"]] += 1
    return {"nodes": rows, "counts": counts}


def _cell(node: asyncpg.Record, index: int, holders: dict, reclaimed: set, util: dict) -> GpuCell:
    key = (node["node_id"], index)
    if not node["alive"]:
        return GpuCell(index, GpuStatus.LOST)
    holder = holders.get(key)
    if holder is not None:
        status = GpuStatus(holder["priority_class"]) if holder["priority_class"] in _CLASSES else GpuStatus.STANDARD
        return GpuCell(index, status, holder["task_id"], holder["name"], util.get(key))
    return GpuCell(index, GpuStatus.RECLAIMED if key in reclaimed else GpuStatus.IDLE, util_pct=util.get(key))


async def _load_utilisation(pool: asyncpg.Pool) -> dict[tuple[str, int], float]:
    try:
        rows = await pool.fetch(f"SELECT node_id, gpu_index, util_pct FROM {DISPATCHER_SCHEMA}.gpu_utilisation")
    except MISSING_TABLES:
        return {}
    return {(r["node_id"], r["gpu_index"]): float(r["util_pct"]) for r in rows}
