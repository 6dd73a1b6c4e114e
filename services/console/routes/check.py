"""Pre-flight over HTTP: every check a submission will face, without submitting it (any token).

    POST /v1/check                 body = a submission (JSON, schema v1, a template may be named)
    GET  /v1/tasks/{id}/check      the same checklist for a task that waits

`?lang=zh`: each check's reason in Chinese. Answer: `{"ok": bool, "checks": [{"check", "passed" (true / false / null: not checked), "detail"}, ...],
"estimated_start", "estimated_end", "card_type"}` — `ok` is true when no check failed. Checks, in
order: template, validation, inputs (each present or not), cards (runtime and cost each), quota (to
the estimated end, and past expiry), approval (needed? from whom?), deadline, start (from a plan
over the current snapshot). `services.preflight`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Request

from services.console.api import MAX_BODY_BYTES, TaskIdPath, read_body
from services.console.labels import Language
from services.console.routes.common import Lang, Pool, now_utc
from services.console.views import load_task
from services.preflight.checklist import Check, Facts, InputFact, InputNote, checklist
from services.preflight.gather import gather_for_submission, gather_for_task
from services.readiness.checks import describe_ref
from shared.events.states import TaskState
from shared.submission import TaskSubmission

router = APIRouter(tags=["pre-flight"])
WAITING = frozenset({TaskState.SUBMITTED, TaskState.WAITING_DATA, TaskState.UNMATCHABLE, TaskState.QUEUED,
                     TaskState.HELD})


@router.post("/check", summary="Pre-flight: every check a submission will face, without submitting it")
async def post_check(request: Request, pool: Pool, lang: Lang = "en") -> dict[str, Any]:
    body = await read_body(request, MAX_BODY_BYTES)
    store = getattr(request.app.state, "config_store", None)
    facts = await gather_for_submission(pool, store.objects if store is not None else None, body, now_utc())
    return answer(facts, lang)


@router.get("/tasks/{task_id}/check", summary="The pre-flight checklist of a task that waits")
async def get_task_check(task_id: TaskIdPath, pool: Pool, lang: Lang = "en") -> dict[str, Any]:
    view = await load_task(pool, task_id)
    if view is None or view.submission is None:
        raise HTTPException(404, f"no submitted task with id {task_id!r} in the views (retry shortly if it is new)")
    if view.state not in WAITING:
        raise HTTPException(409, f"task {task_id} is {view.state.value}: the checklist is for a task that waits")
    submission = TaskSubmission.model_validate(view.submission)
    missing = set(view.missing_inputs)
    inputs = [InputFact(_input_name(ref), None if view.ready is None else _input_name(ref) not in missing,
                        "" if view.ready is not None else InputNote.NOT_CHECKED_YET) for ref in submission.inputs]  # fmt: skip
    facts = await gather_for_task(pool, task_id, submission, view.template, inputs, now_utc())
    return answer(facts, lang)


def answer(facts: Facts, lang: Language = "en") -> dict[str, Any]:
    checks: list[Check] = checklist(facts, lang)
    estimate = facts.estimate
    when = lambda epoch: None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()  # noqa: E731
    return {
        "ok": not any(check.passed is False for check in checks),
        "checks": [check.as_json() for check in checks],
        "estimated_start": when(estimate.start_at) if estimate else None,
        "estimated_end": when(estimate.end_at) if estimate else None,
        "card_type": estimate.card_type if estimate else (facts.match.chosen.card_type if facts.match and facts.match.chosen else None),
    }


def _input_name(ref: Any) -> str:
    return describe_ref(ref)
