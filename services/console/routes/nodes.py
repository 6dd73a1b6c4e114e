"""`GET /v1/nodes`: every node like Slurm's sinfo — card type, GPUs used / borrowed / free, state,
last heartbeat (`services.operator.nodes`). Any valid token may read it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from services.console.auth import Authenticated
from services.console.routes.common import Pool, now_utc
from services.operator.nodes import load_nodes

router = APIRouter(tags=["fleet"])


@router.get("/nodes", summary="Nodes: card type, GPUs used / borrowed / free, state, last heartbeat")
async def get_nodes(pool: Pool, _reader: Authenticated) -> list[dict[str, Any]]:
    return [asdict(row) for row in await load_nodes(pool, now_utc())]
