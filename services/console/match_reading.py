"""Reads of the matcher's record (`matcher.matches`, read-only) for the console's routes: a task's
matches with their full ranking, and one match's sentence in the reader's language.

    await load_matches(pool, task_id)                          # oldest first, each with its ranking
    await match_sentence(pool, match_event_id, english, "zh")  # rendered from the stored numbers

Sentences come from `services.matcher.match_reasons` (rendered from the numbers the matcher
stored, never translated from the English text); before the matcher created its schema, there is
nothing to read (no matches; the English sentence).
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from services.console.labels import Language
from services.console.views import MISSING_TABLES
from services.matcher.match_reasons import match_reason_text, ranking_row_why_not

MATCHER_SCHEMA = "matcher"


async def load_matches(pool: asyncpg.Pool, task_id: str, lang: Language = "en") -> list[dict[str, Any]]:
    """The matcher's decisions for the task, oldest first, each with its full ranking; `why` (the
    choice) and each row's `why_not_text` in `lang`."""
    try:
        rows = await pool.fetch(
            f"SELECT match_id, trigger, matched, chosen, oversized, unmatchable_reason, reason, ranking::text AS ranking,"
            f" reason_facts::text AS reason_facts, catalog_version, created_at FROM {MATCHER_SCHEMA}.matches"
            f" WHERE task_id = $1 ORDER BY created_at, match_id",
            task_id,
        )
    except MISSING_TABLES:
        return []
    return [_match_json(dict(row), lang) for row in rows]


def _match_json(row: dict[str, Any], lang: Language) -> dict[str, Any]:
    match = {**row, "created_at": row["created_at"].isoformat(),
             "reason_facts": json.loads(row["reason_facts"]) if row["reason_facts"] else None}  # fmt: skip
    match["ranking"] = [{**r, "why_not_text": ranking_row_why_not(r, lang)} for r in json.loads(row["ranking"])]
    match["why"] = match_reason_text(match, lang)
    return match


async def match_sentence(pool: asyncpg.Pool, match_event_id: str, english: str, lang: Language) -> str:
    """The sentence of the match `task.matched` event `match_event_id` in `lang`, rendered from the
    numbers the matcher stored with it (the ledger and the archive keep only its English sentence);
    the English one when the matcher's record is gone."""
    if lang == "en":
        return english
    try:
        facts = await pool.fetchval(f"SELECT reason_facts::text FROM {MATCHER_SCHEMA}.matches WHERE event_id = $1", match_event_id)
    except MISSING_TABLES:
        facts = None
    return match_reason_text({"reason": english, "reason_facts": json.loads(facts) if facts else None}, lang)
