"""Audit endpoints (role `auditor`): verify the archive, replay any moment, why a task, who changed what.

    GET /v1/audit/verify?settle_s=15        the four checks (docs/audit.md); `ok` and `first_break`
    GET /v1/audit/replay?until=<time>       the state folded from the archive up to that moment
    GET /v1/audit/why/{task_id}?lang=zh     the story of a task, step by step, by run (in Chinese: services.console.audit_sentences)
    GET /v1/audit/log?actor=&type=&since=   changes people made (config, quotas, approvals, cancels, tokens, rounds)

Everything reads the archive (`audit.events`) the ledger writes; `verify` also reads the live read
models and the archive bucket.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request

from services.audit.queries import UnknownTaskError, change_log, replay_at, state_json, tell_story
from services.audit.story import story_json
from services.console.audit_sentences import reason_name_zh, step_told_in
from services.console.match_reading import match_sentence
from services.audit.verify import verify_archive
from services.console.routes.common import Lang, unprocessable
from services.console.auth import requires
from shared.identity import Principal, Role
from shared.storage import open_object_store

router = APIRouter(prefix="/audit", tags=["audit"])
Auditor = Annotated[Principal, requires(Role.AUDITOR)]
MAX_SETTLE_S = 120.0


@router.get("/verify", summary="Check the hash chain, the segments, completeness and replay against the live state")
async def get_verify(
    request: Request, _: Auditor,
    settle_s: Annotated[float, Query(ge=0, le=MAX_SETTLE_S, description="re-check differences this long")] = 15.0,
) -> dict[str, Any]:  # fmt: skip
    settings = request.app.state.settings
    if not settings.s3_endpoint:
        report = await verify_archive(request.app.state.pool, None, settle_s=settle_s)
    else:
        async with open_object_store(settings) as store:
            report = await verify_archive(request.app.state.pool, store, settle_s=settle_s)
    return report.as_json()


@router.get("/replay", summary="The state folded from the archive up to a moment")
async def get_replay(
    request: Request, _: Auditor,
    until: Annotated[datetime | None, Query(description="ISO 8601 with a time zone; default: everything archived")] = None,
) -> dict[str, Any]:  # fmt: skip
    if until is not None and until.tzinfo is None:
        raise unprocessable(("query", "until"), f"until={until.isoformat()} has no time zone; add one, e.g. Z or +08:00")
    return state_json(await replay_at(request.app.state.pool, until))


@router.get("/why/{task_id}", summary="The whole story of a task", responses={404: {"description": "no such task"}})
async def get_why(task_id: str, request: Request, _: Auditor, lang: Lang = "en") -> dict[str, Any]:
    pool = request.app.state.pool
    try:
        story = await tell_story(pool, task_id)
    except UnknownTaskError as exc:
        raise HTTPException(404, str(exc)) from None
    answer = story_json(story)
    whys = {s.event_id: await match_sentence(pool, s.event_id, "", lang) for s in story.steps if s.type == "task.matched"}
    answer["steps"] = [line | step_told_in(step, lang, whys.get(step.event_id)) for step, line in zip(story.steps, answer["steps"], strict=True)]
    for run in answer["runs"]:
        run["end_reason_label"] = reason_name_zh(run["end_reason"]) if lang == "zh" else run["end_reason"]
    return answer


@router.get("/log", summary="Who changed what: configuration, quotas, approvals, cancellations, tokens, rounds")
async def get_log(
    request: Request, _: Auditor,
    actor: Annotated[str | None, Query(description="user:alice, or alice (any kind)")] = None,
    type: Annotated[str | None, Query(description="an event type, or a prefix ending in '.' (quota.)")] = None,  # noqa: A002
    since: Annotated[datetime | None, Query(description="ISO 8601 with a time zone")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> list[dict[str, Any]]:  # fmt: skip
    return await change_log(request.app.state.pool, actor=actor, event_type=type, since=since, limit=limit)
