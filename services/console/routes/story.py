"""A task's story: its view, every event applied to it, and every card-type match with the ranking.

With `lang=zh` every line a reader reads is Chinese where structured data allows: each history
line's event type (`event_label`), reason (`reason_label`) and `sentence` (rendered from the
fields stored with the line; None where only the service's English `detail` exists, which the
reader then sees marked as original: `original_needed`), each match's `why` and each ranked card's
`why_not_text`. English (the default) shows the event type, the reason and the detail as they are.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from services.console.api import TaskIdPath
from services.console.blockers import blocker_of, preflight
from services.console.labels import REASON_LABELS_ZH, Language
from services.console.labels_events import event_type_label
from services.console.match_reading import load_matches
from services.console.routes.common import Lang, Pool
from services.console.sentences import history_sentence, needs_original, reason_sentence
from services.console.views import HistoryEntry, load_task, task_history

router = APIRouter(tags=["tasks"])


@router.get("/tasks/{task_id}/story", responses={404: {"description": "unknown task"}},
            summary="The task, its history with reasons, its card-type matches (every alternative) and checklist")  # fmt: skip
async def get_task_story(task_id: TaskIdPath, pool: Pool, lang: Lang = "en") -> dict[str, Any]:
    view = await load_task(pool, task_id)
    if view is None:
        raise HTTPException(404, f"no task with id {task_id!r} in the views; check the id, or retry if it was just submitted")
    return {
        "task": view.model_dump(mode="json"),
        "blocker": None if view.is_terminal else blocker_of(view).value,
        "sentence": reason_sentence(view, lang),
        "original_needed": needs_original(view, lang),
        "preflight": None if view.is_terminal else {c.value: ok for c, ok in preflight(view).items()},
        "history": [history_line(entry, lang) for entry in await task_history(pool, task_id)],
        "matches": await load_matches(pool, task_id, lang),
    }


def history_line(entry: HistoryEntry, lang: Language) -> dict[str, Any]:
    """One history entry as the story shows it, in `lang`."""
    sentence, original_needed = history_sentence(entry.reason, entry.detail, entry.facts, lang)
    return {**entry.model_dump(mode="json"), "event_label": event_type_label(entry.type, lang),
            "reason_label": _reason_label(entry.reason, lang), "sentence": sentence, "original_needed": original_needed}  # fmt: skip


def _reason_label(reason: str, lang: str) -> str:
    return REASON_LABELS_ZH.get(reason, reason) if lang == "zh" else reason
