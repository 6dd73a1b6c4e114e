"""Time series for the console's plots: utilisation per card type, queue length per class, spend per project."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from services.console.routes.common import Pool, now_utc
from services.console.series import queue_series, quota_burn_series, spend_series, utilisation_series

router = APIRouter(prefix="/series", tags=["plots"])
Hours = Annotated[float, Query(gt=0, le=24 * 90, description="window in hours (cut to the first recorded fact)")]


@router.get("/utilisation", summary="Share of each card type's GPUs leased, per time bucket")
async def get_utilisation(pool: Pool, hours: Hours = 24) -> dict[str, Any]:
    return await utilisation_series(pool, now_utc(), hours)


@router.get("/queue", summary="Tasks queued or held per priority class, per time bucket")
async def get_queue_length(pool: Pool, hours: Hours = 24) -> dict[str, Any]:
    return await queue_series(pool, now_utc(), hours)


@router.get("/spend", summary="Cost and GPU-hours per project per UTC day")
async def get_spend(pool: Pool, days: Annotated[int, Query(ge=1, le=366)] = 14) -> dict[str, Any]:
    return await spend_series(pool, now_utc(), days)


@router.get("/quota-burn", summary="GPU-hours left per quota account over time (a burn-down)")
async def get_quota_burn(pool: Pool, days: Annotated[float, Query(gt=0, le=366)] = 30) -> dict[str, Any]:
    return await quota_burn_series(pool, now_utc(), days)
