"""`GET /v1/lookup/task?ref=`: the task an id, an idempotency key or a unique name stands for
(`services.operator.task_refs`). Any valid token may ask.

Answers: 200 `{"task_id", "matched_by"}` (`id`, `idempotency_key` or `name`); 404 no task has that
id, key or name; 409 several tasks carry that name (the detail lists them).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from services.console.auth import Authenticated
from services.console.routes.common import Pool
from services.operator.task_refs import Ambiguous, MatchedBy, resolve_task_ref

router = APIRouter(tags=["tasks"])


class TaskFound(BaseModel):
    task_id: str
    matched_by: MatchedBy


@router.get("/lookup/task", response_model=TaskFound, summary="The task an id, idempotency key or unique name names",
            responses={404: {"description": "no such task"}, 409: {"description": "several tasks carry that name"}})
async def lookup_task(
    pool: Pool, _reader: Authenticated,
    ref: Annotated[str, Query(min_length=1, max_length=500, description="a task id, idempotency key or name")],
) -> TaskFound:  # fmt: skip
    found = await resolve_task_ref(pool, ref)
    if found is None:
        raise HTTPException(404, f"no task has the id, idempotency key or name {ref!r} (`cardflow tasks` lists them)")
    if isinstance(found, Ambiguous):
        raise HTTPException(409, found.sentence())
    return TaskFound(task_id=found.task_id, matched_by=found.matched_by)
