"""Fleet grid endpoint: nodes x GPUs with the class of the task holding each GPU and its utilisation."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from services.console.fleet_grid import load_fleet_grid
from services.console.routes.common import Pool, now_utc

router = APIRouter(tags=["fleet"])


@router.get("/fleet/grid", summary="Every node's GPUs: held by which class of task, idle, reclaimed or lost")
async def get_fleet_grid(pool: Pool) -> dict[str, Any]:
    return await load_fleet_grid(pool, now_utc())
