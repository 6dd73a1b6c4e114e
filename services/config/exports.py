"""Export the task list and the demand plan to the versioned reports bucket, by hand or once a day.

    record = await export_task_list(pool, objects, trigger=ExportTrigger.MANUAL, actor="user:alice",
                                    reason="hand-over to the night shift")

Objects (keys sort by date; a second export of a day is a new version of the same keys, so every
export stays readable by its version id):

    exports/<YYYY-MM-DD>/tasks.csv  tasks.json  demand.csv  demand.json

Each export is a row in `config.exports` (day, trigger, actor, reason, keys with their version ids). The
daily one (`run_daily_export`, the config service's loop) runs once per UTC day from
`CARDFLOW_EXPORT_HOUR_UTC` on, whichever config instance takes the lock first.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

import asyncpg

from services.config.store import SCHEMA
from shared.delivery.migrations import advisory_key
from shared.events import new_event_id, utcnow
from shared.logging import get_logger
from shared.names import REPORTS_BUCKET
from shared.task_view import TaskView
from shared.storage import ObjectStore
from shared.task_export import DEMAND_COLUMNS, TASK_COLUMNS, demand_rows, task_rows, to_csv

DAILY_ACTOR = "system:daily-export"
_LOCK = advisory_key("daily-export", SCHEMA)

log = get_logger(__name__)


class ExportTrigger(StrEnum):
    DAILY = "daily"  # the config service's own loop
    MANUAL = "manual"  # `cardflow export` / POST /v1/exports


@dataclass(frozen=True, slots=True)
class ExportedObject:
    key: str
    version_id: str | None
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ExportRecord:
    export_id: str
    day: date
    trigger: ExportTrigger
    actor: str
    objects: tuple[ExportedObject, ...]
    tasks: int
    at: datetime
    reason: str = ""

    def summary(self, bucket: str = REPORTS_BUCKET) -> dict[str, Any]:
        """As JSON; `bucket` is the reports bucket as the server names it (`ObjectStore.bucket_name`)."""
        return {"export_id": self.export_id, "day": self.day.isoformat(), "trigger": self.trigger.value,
                "actor": self.actor, "reason": self.reason, "tasks": self.tasks, "at": self.at.isoformat(),
                "bucket": bucket, "objects": [asdict(o) for o in self.objects]}  # fmt: skip


async def load_views(pool: asyncpg.Pool) -> list[TaskView]:
    """Every task of the views (empty when the views service has not run yet)."""
    if not await pool.fetchval("SELECT to_regclass('views.tasks') IS NOT NULL"):
        return []
    return [TaskView.model_validate(row["view"]) for row in await pool.fetch("SELECT view FROM views.tasks")]


async def export_task_list(
    pool: asyncpg.Pool, objects: ObjectStore, *, trigger: ExportTrigger, actor: str, reason: str,
    bucket: str = REPORTS_BUCKET, prefix: str = "", now: datetime | None = None,
) -> ExportRecord:
    """Write the four objects of the export of `now`'s UTC day (default: today) and record them with
    who and why."""
    now = (now or utcnow()).astimezone(UTC)
    views = await load_views(pool)
    tasks, demand = task_rows(views), demand_rows(views)
    meta = {"generated_at": now.isoformat(), "actor": actor, "reason": reason, "trigger": trigger.value}
    bodies = {
        "tasks.csv": to_csv(tasks, TASK_COLUMNS), "demand.csv": to_csv(demand, DEMAND_COLUMNS),
        "tasks.json": json.dumps(meta | {"tasks": tasks}, indent=1, ensure_ascii=False),
        "demand.json": json.dumps(meta | {"demand": demand}, indent=1, ensure_ascii=False),
    }  # fmt: skip
    written = []
    for name, text in bodies.items():
        body = text.encode()
        key = f"{prefix}exports/{now.date().isoformat()}/{name}"
        kind = "text/csv" if name.endswith(".csv") else "application/json"
        put = await objects.put(bucket, key, body, content_type=f"{kind}; charset=utf-8", metadata={"cardflow-actor": actor[:200]})
        written.append(ExportedObject(key, put.version_id, len(body), hashlib.sha256(body).hexdigest()))
    record = ExportRecord(new_event_id(), now.date(), trigger, actor, tuple(written), len(tasks), now, reason)
    await pool.execute(
        f"INSERT INTO {SCHEMA}.exports (export_id, day, trigger, actor, objects, tasks, at, reason)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        record.export_id, record.day, record.trigger.value, record.actor, [asdict(o) for o in written], record.tasks,
        record.at, record.reason,
    )  # fmt: skip
    log.info("task list exported", day=record.day.isoformat(), trigger=trigger.value, tasks=record.tasks)
    return record


async def list_exports(pool: asyncpg.Pool, limit: int = 100) -> list[ExportRecord]:
    """The latest exports, newest first."""
    rows = await pool.fetch(
        f"SELECT export_id, day, trigger, actor, objects, tasks, at, reason FROM {SCHEMA}.exports ORDER BY at DESC LIMIT $1",
        limit,
    )
    return [ExportRecord(row["export_id"], row["day"], ExportTrigger(row["trigger"]), row["actor"],
                         tuple(ExportedObject(**o) for o in row["objects"]), row["tasks"], row["at"], row["reason"])
            for row in rows]  # fmt: skip


async def run_daily_export(
    pool: asyncpg.Pool, objects: ObjectStore, *, hour_utc: int = 0, now: datetime | None = None
) -> ExportRecord | None:
    """The daily export of `now`'s UTC day (default: today) if it is due and not done yet (one instance
    at a time); else None. The config service calls it every `check_s` with its clock's time."""
    now = (now or utcnow()).astimezone(UTC)
    if now.hour < hour_utc:
        return None
    async with pool.acquire() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK):
            return None
        try:
            done = await conn.fetchval(
                f"SELECT 1 FROM {SCHEMA}.exports WHERE day = $1 AND trigger = 'daily'", now.date()
            )
            if done:
                return None
            return await export_task_list(pool, objects, trigger=ExportTrigger.DAILY, actor=DAILY_ACTOR, now=now,
                                          reason=f"the daily export (due from {hour_utc:02d}:00 UTC)")  # fmt: skip
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK)
