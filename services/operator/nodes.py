"""`cardflow nodes`, like Slurm's `sinfo`: each node's card type, GPUs used / borrowed / free, state
and last heartbeat.

Built on the console's fleet grid (`services.console.fleet_grid`: which class of task holds each GPU)
and the dispatcher's `nodes.last_seen` (read-only). "Borrowed" GPUs are the used ones held by
opportunistic work, which yields them to core work. A node is `up` while it heartbeats, `lost` after;
an operator's drain makes it `draining` while leases still run there, then `drained` (its free
count is 0 then: no new lease may use its idle GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from services.console.fleet_grid import GpuStatus, load_fleet_grid

_USED = frozenset({GpuStatus.CORE.value, GpuStatus.STANDARD.value, GpuStatus.OPPORTUNISTIC.value})
_FREE = frozenset({GpuStatus.IDLE.value, GpuStatus.RECLAIMED.value})
_NOT_CREATED = (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError)


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    card_type: str
    state: str  # up | lost | draining | drained
    gpus: int
    used: int
    borrowed: int
    free: int
    mean_util_pct: float | None
    last_heartbeat: datetime | None
    drain_reason: str = ""  # who drained it and why, when drained


def node_rows(grid: dict[str, Any], last_seen: dict[str, datetime]) -> list[NodeRow]:
    """One row per node of the fleet grid (pure)."""
    rows = []
    for node in grid["nodes"]:
        cells = node["gpus"]
        utils = [cell["util_pct"] for cell in cells if cell["util_pct"] is not None]
        used = sum(cell["status"] in _USED for cell in cells)
        drained = bool(node.get("drained"))
        rows.append(NodeRow(
            node_id=node["node_id"], card_type=node["card_type"], state=node_state(node["alive"], drained, used),
            gpus=len(cells), used=used, borrowed=sum(cell["status"] == GpuStatus.OPPORTUNISTIC.value for cell in cells),
            free=0 if drained else sum(cell["status"] in _FREE for cell in cells),
            mean_util_pct=round(sum(utils) / len(utils), 1) if utils else None,
            last_heartbeat=last_seen.get(node["node_id"]),
            drain_reason=f"{node.get('drained_by') or 'an operator'}: {node.get('drain_reason', '')}" if drained else "",
        ))  # fmt: skip
    return rows


def node_state(alive: bool, drained: bool, used: int) -> str:
    """sinfo-like: `lost` (silent), `draining` (drained, leases still running), `drained`, `up`."""
    if not alive:
        return "lost"
    if drained:
        return "draining" if used else "drained"
    return "up"


async def load_nodes(pool: asyncpg.Pool, now: datetime) -> list[NodeRow]:
    return node_rows(await load_fleet_grid(pool, now), await load_last_seen(pool))


async def load_last_seen(pool: asyncpg.Pool) -> dict[str, datetime]:
    try:
        rows = await pool.fetch("SELECT node_id, last_seen FROM dispatcher.nodes")
    except _NOT_CREATED:
        return {}
    return {row["node_id"]: row["last_seen"] for row in rows}
