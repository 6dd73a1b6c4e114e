"""Which task a person means: an id, an idempotency key, or a name that only one task has.

    found = await resolve_task_ref(pool, "finetune-13b")     # TaskRef | Ambiguous | None

Every CLI command that takes a TASK asks `GET /v1/lookup/task?ref=` first, so `cardflow status`,
`cancel`, `hold` ... accept what a person remembers. Candidates come from intake's tables (a task
exists there the moment it is submitted, before the views show it), rejected attempts included
(`cardflow status` explains a rejection), and from the views (a task intake of another database
never saw, e.g. one replayed from the event log). The choice is pure (`choose_task`): an exact id wins,
then an idempotency key (the submitted task, not a rejected attempt that reused the key), then a
name carried by exactly one task; a name several tasks share is ambiguous and lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import asyncpg

MAX_LISTED = 10


class MatchedBy(StrEnum):
    ID = "id"
    IDEMPOTENCY_KEY = "idempotency_key"
    NAME = "name"


@dataclass(frozen=True, slots=True)
class TaskCandidate:
    """A submitted task or a rejected attempt that the reference may name."""

    task_id: str
    idempotency_key: str | None
    name: str | None
    at: datetime  # submitted or rejected
    rejected: bool = False


@dataclass(frozen=True, slots=True)
class TaskRef:
    task_id: str
    matched_by: MatchedBy


@dataclass(frozen=True, slots=True)
class Ambiguous:
    """A name several tasks carry: which ones (newest first), so the person can pick an id."""

    ref: str
    candidates: tuple[TaskCandidate, ...]

    def sentence(self) -> str:
        shown = ", ".join(f"{c.task_id} ({c.at:%Y-%m-%d %H:%M})" for c in self.candidates[:MAX_LISTED])
        more = f" and {len(self.candidates) - MAX_LISTED} more" if len(self.candidates) > MAX_LISTED else ""
        return f"{len(self.candidates)} tasks are named {self.ref!r}: {shown}{more}; give the task id instead"


def choose_task(ref: str, candidates: Sequence[TaskCandidate]) -> TaskRef | Ambiguous | None:
    """The task `ref` names among `candidates` (the module docstring's order); None: no task."""
    if any(c.task_id == ref for c in candidates):
        return TaskRef(ref, MatchedBy.ID)
    keyed = sorted((c for c in candidates if c.idempotency_key == ref), key=lambda c: (c.rejected, -c.at.timestamp()))
    if keyed:
        return TaskRef(keyed[0].task_id, MatchedBy.IDEMPOTENCY_KEY)
    named = sorted((c for c in candidates if c.name == ref and not c.rejected), key=lambda c: c.at, reverse=True)
    if len(named) == 1:
        return TaskRef(named[0].task_id, MatchedBy.NAME)
    if named:
        return Ambiguous(ref, tuple(named))
    return None


CANDIDATE_QUERIES = (
    "SELECT task_id, idempotency_key, name, submitted_at AS at, false AS rejected FROM intake.tasks"
    " WHERE task_id = $1 OR idempotency_key = $1 OR name = $1"
    " UNION ALL SELECT task_id, idempotency_key, name, rejected_at, true FROM intake.rejections"
    " WHERE task_id = $1 OR idempotency_key = $1",
    "SELECT id AS task_id, idempotency_key, name, updated_at AS at, state = 'rejected' AS rejected FROM views.tasks"
    " WHERE id = $1 OR idempotency_key = $1 OR name = $1",
)
MISSING = (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError)


async def resolve_task_ref(pool: asyncpg.Pool, ref: str) -> TaskRef | Ambiguous | None:
    """`choose_task` over the tasks and rejected attempts whose id, key or name is `ref` (intake's
    record of a task first; the views add what intake does not hold)."""
    found: dict[str, TaskCandidate] = {}
    for sql in CANDIDATE_QUERIES:
        try:
            rows = await pool.fetch(sql, ref)
        except MISSING:  # that service has not created its tables in this database
            continue
        for r in rows:
            found.setdefault(r["task_id"], TaskCandidate(r["task_id"], r["idempotency_key"], r["name"], r["at"], r["rejected"]))
    return choose_task(ref, list(found.values()))
