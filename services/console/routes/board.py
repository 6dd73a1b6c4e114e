"""Readiness board endpoints: the board now (grouped by what tasks wait for), its last N days, the
queue in dispatch order, and the daily snapshot to the reports bucket."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Query, Request
from pydantic import BaseModel, Field

from services.config.holder import DocumentHolder, policy_holder
from services.console.auth import Authenticated
from services.console.blockers import preflight, queue_order
from services.console.boards import load_board_groups, load_board_history, load_open_views, load_queue_estimates
from services.console.routes.common import Lang, Pool, now_utc
from services.console.sentences import needs_original, reason_sentence
from services.console.snapshots import SnapshotWritten, list_snapshots, write_board_snapshot
from shared.events.states import TaskState
from shared.task_view import TaskView
from shared.scheduling.policy_knobs import Policy

router = APIRouter(tags=["board"])


@router.get("/board/groups", summary="Open tasks grouped by what they wait for (data, quota, approval, capacity...)")
async def get_board_groups(pool: Pool, lang: Lang = "en") -> dict[str, Any]:
    return await load_board_groups(pool, lang)


@router.get("/board/history", summary="How long tasks of the last N days waited for data, by project and input")
async def get_board_history(pool: Pool, days: Annotated[int, Query(ge=1, le=366)] = 7) -> dict[str, Any]:
    return await load_board_history(pool, days, now_utc())


@router.get("/queue", summary="Queued and held tasks in the order the dispatcher considers them, with estimated starts")
async def get_queue(request: Request, pool: Pool, lang: Lang = "en",
                    running: Annotated[bool, Query(description="also the leased and running tasks, first")] = False,
                    ) -> list[dict[str, Any]]:  # fmt: skip
    policies = _policies(request)
    await policies.refresh(pool)  # the policy document in force (its queue order and aging)
    views = await load_open_views(pool)
    ordered = queue_order(views, now_utc(), policies.value)
    estimates = await load_queue_estimates(pool)
    rows = [_queue_row(view, lang, estimates.get(view.id)) | {"position": position}
            for position, view in enumerate(ordered, start=1)]
    if running:
        active = sorted((v for v in views if v.state in (TaskState.LEASED, TaskState.RUNNING)),
                        key=lambda v: (v.started_at or v.last_event_at or now_utc(), v.id))
        rows = [_queue_row(view, lang, None) | {"position": None} for view in active] + rows
    return rows


def _queue_row(view: TaskView, lang: str, estimate: dict[str, Any] | None) -> dict[str, Any]:
    estimate = estimate or {}
    return {
        "id": view.id, "name": view.name, "project": view.project,
        "priority_class": view.priority_class.value if view.priority_class else None, "priority": view.priority,
        "gpus": view.gpus, "card_type": view.card_type, "state": view.state.value, "reason": view.reason,
        "sentence": reason_sentence(view, lang), "reason_detail": view.reason_detail,
        "original_needed": needs_original(view, lang),
        "est_runtime_s": view.match.est_runtime_s if view.match else None,
        "est_cost": view.match.est_cost if view.match else None,
        "submitted_at": view.submitted_at.isoformat() if view.submitted_at else None,
        "ready": view.ready,
        "deadline": (view.submission or {}).get("deadline"),
        "estimated_start": estimate.get("estimated_start"), "estimated_end": estimate.get("estimated_end"),
        "deadline_at_risk": estimate.get("deadline_at_risk", False), "why_not_estimated": estimate.get("why_not", ""),
        "dispatcher_position": estimate.get("position"),
        "start_reason": view.start_reason, "passed": view.passed,
        "preflight": {check.value: passed for check, passed in preflight(view).items()},
    }  # fmt: skip


class SnapshotRequest(BaseModel):
    reason: str = Field("on demand", max_length=500, description="why the snapshot is taken (kept in its metadata)")


def _policies(request: Request) -> DocumentHolder[Policy]:
    """The console's holder of the policy document in force (created on first use)."""
    if getattr(request.app.state, "policies", None) is None:
        request.app.state.policies = policy_holder(fallback=Policy())
    return request.app.state.policies


@router.post("/board/snapshot", status_code=201, response_model=SnapshotWritten,
             summary="Write the board now to the reports bucket as HTML and CSV (versioned)")  # fmt: skip
async def post_board_snapshot(request: Request, pool: Pool, principal: Authenticated,
                              body: Annotated[SnapshotRequest | None, Body()] = None) -> SnapshotWritten:  # fmt: skip
    settings = request.app.state.settings
    if not settings.s3_endpoint:
        raise HTTPException(503, "no object store configured (CARDFLOW_S3_ENDPOINT); board snapshots need the reports bucket")
    reason = (body or SnapshotRequest()).reason
    return await write_board_snapshot(pool, settings, now_utc(), actor=principal.actor, reason=reason)


@router.get("/board/snapshots", summary="Board snapshots in the reports bucket, newest first")
async def get_board_snapshots(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 60) -> list[dict[str, Any]]:
    settings = request.app.state.settings
    if not settings.s3_endpoint:
        raise HTTPException(503, "no object store configured (CARDFLOW_S3_ENDPOINT)")
    return await list_snapshots(settings, limit)
