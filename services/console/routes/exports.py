"""Task-list exports over HTTP: `POST /v1/exports` {reason} writes one now (operator), `GET /v1/exports` lists them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict

from services.config.exports import ExportTrigger, export_task_list, list_exports
from services.console.auth import Authenticated, requires
from services.console.routes.config import Reason, store_of
from shared.identity import Principal, Role
from shared.names import REPORTS_BUCKET

router = APIRouter(tags=["exports"])


class ExportRequest(BaseModel):
    """Body of POST /v1/exports."""

    model_config = ConfigDict(extra="forbid")
    reason: Reason


@router.post("/exports", status_code=201, summary="Export every task and the demand plan to the reports bucket now (operator)")
async def post_export(request: Request, body: ExportRequest,
                      operator: Annotated[Principal, requires(Role.OPERATOR)]) -> dict[str, Any]:  # fmt: skip
    store = store_of(request)
    record = await export_task_list(store.pool, store.objects, trigger=ExportTrigger.MANUAL, actor=operator.actor,
                                    reason=body.reason)  # fmt: skip
    return record.summary(store.objects.bucket_name(REPORTS_BUCKET))


@router.get("/exports", summary="The latest exports, newest first: day, who, the objects and their versions")
async def get_exports(request: Request, _: Authenticated,
                      limit: Annotated[int, Query(ge=1, le=1000)] = 60) -> list[dict[str, Any]]:  # fmt: skip
    bucket = store_of(request).objects.bucket_name(REPORTS_BUCKET)
    return [record.summary(bucket) for record in await list_exports(request.app.state.pool, limit)]
