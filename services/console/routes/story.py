"""A task's story: its view, every event applied to it, and every card-type match with the ranking."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from fastapi import APIRouter, HTTPException

from services.console.api import TaskIdPath
from services.console.blockers import blocker_of, preflight
from services.console.labels import REASON_LABELS_ZH
from services.console.routes.common import Lang, Pool
from services.console.sentences import needs_original, reason_sentence
from services.console.views import load_task, task_history
from services.console.views import MISSING_TABLES

router = APIRouter(tags=["tasks"])
MATCHER_SCHEMA = "matcher"


@router.get("/tasks/{task_id}/story", responses={404: {"description": "unknown task"}},
            summary="The task, its history with reasons, its card-type matches (every alternative) and checklist")  # fmt: skip
async def get_task_story(task_id: TaskIdPath, pool: Pool, lang: Lang = "en") -> dict[str, Any]:
    view = await load_task(pool, task_id)
    if view is None:
        raise HTTPException(404, f"no task with id {task_id!r} in the views; check the id, or retry if it was just submitted")
    history = [
        {**entry.model_dump(mode="json"), "reason_label": _reason_label(entry.reason, lang)}
        for entry in await task_history(pool, task_id)
    ]
    return {
        "task": view.model_dump(mode="json"),
        "blocker": None if view.is_terminal else blocker_of(view).value,
        "sentence": reason_sentence(view, lang),
        "original_needed": needs_original(view, lang),
        "preflight": None if view.is_terminal else {c.value: ok for c, ok in preflight(view).items()},
        "history": history,
        "matches": await load_matches(pool, task_id),
    }


def _reason_label(reason: str, lang: str) -> str:
    return REASON_LABELS_ZH.get(reason, reason) if lang == "zh" else reason


async def load_matches(pool: asyncpg.Pool, task_id: str) -> list[dict[str, Any]]:
    """The matcher's decisions for the task, oldest first, each with its full ranking (read-only)."""
    try:
        rows = await pool.fetch(
            f"SELECT match_id, trigger, matched, chosen, oversized, unmatchable_reason, reason, ranking::text AS ranking,"
            f" reason_facts::text AS reason_facts, catalog_version, created_at FROM {MATCHER_SCHEMA}.matches"
            f" WHERE task_id = $1 ORDER BY created_at, match_id",
            task_id,
        )
    except MISSING_TABLES:
        return []
    return [{**dict(row), "ranking": json.loads(row["ranking"]), "created_at": row["created_at"].isoformat(),
             "reason_facts": json.loads(row["reason_facts"]) if row["reason_facts"] else None} for row in rows]  # fmt: skip
