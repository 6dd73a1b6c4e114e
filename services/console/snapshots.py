"""The readiness board as a daily record: HTML and CSV in the reports bucket, one key per UTC day.

    written = await write_board_snapshot(pool, settings, now, actor="user:alice", reason="before the review")
    # s3://cardflow-reports/board/2026-12-01/board.html, board.zh.html, board.csv (versioned:
    # a second snapshot of the same day is a new version of the same keys)

`run_daily_board_snapshots` is the loop in the console process: at start-up it writes today's
snapshot if the day has none yet, then one shortly after each UTC midnight (actor
`system:board-snapshot`). Several console processes may write the same day; each write is a new
version, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from pydantic import BaseModel

from services.console.blockers import Board, group_board
from services.console.boards import board_json, load_open_views, load_waiting_since
from services.console.labels import LANGUAGES
from services.console.pages.templating import render_snapshot_html
from shared.logging import get_logger
from shared.names import REPORTS_BUCKET
from shared.settings import Settings
from shared.storage import ObjectStore, open_object_store

PREFIX = "board/"
DAILY_ACTOR = "system:board-snapshot"
AFTER_MIDNIGHT = timedelta(minutes=5)
CSV_COLUMNS = ("snapshot_at", "blocker", "task_id", "name", "project", "priority_class", "gpus", "card_type",
               "state", "reason", "waiting_since", "missing_inputs", "sentence")  # fmt: skip

log = get_logger(__name__)


class SnapshotObject(BaseModel):
    key: str
    version_id: str | None
    size: int


class SnapshotWritten(BaseModel):
    bucket: str
    day: str
    taken_at: datetime
    tasks: int
    objects: list[SnapshotObject]


def day_prefix(day: datetime) -> str:
    return f"{PREFIX}{day.astimezone(UTC).date().isoformat()}/"


def board_csv(board: Board, taken_at: datetime) -> str:
    """One row per open task: its group, reason, since when it waits and on which inputs."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for group in board_json(board, "en")["groups"]:
        for task in group["tasks"]:
            writer.writerow([
                taken_at.isoformat(), group["kind"], task["id"], task["name"], task["project"], task["priority_class"],
                task["gpus"], task["card_type"], task["state"], task["reason"], task["waiting_since"],
                " ".join(i["input"] for i in task["inputs"]), task["sentence"],
            ])  # fmt: skip
    return out.getvalue()


async def write_board_snapshot(pool: asyncpg.Pool, settings: Settings, now: datetime, *,
                               actor: str = DAILY_ACTOR, reason: str = "daily board snapshot") -> SnapshotWritten:  # fmt: skip
    """Store the board now under `board/<UTC day>/` as board.html (English), board.zh.html, board.csv."""
    board = group_board(await load_open_views(pool), await load_waiting_since(pool))
    bodies: dict[str, tuple[bytes, str]] = {"board.csv": (board_csv(board, now).encode(), "text/csv; charset=utf-8")}
    for lang in LANGUAGES:
        name = "board.html" if lang == "en" else f"board.{lang}.html"
        bodies[name] = (render_snapshot_html(board_json(board, lang), lang, now).encode(), "text/html; charset=utf-8")
    metadata = {"actor": actor, "reason": reason[:500], "taken-at": now.isoformat()}
    async with open_object_store(settings) as store:
        await store.ensure_bucket(REPORTS_BUCKET)
        written = [await _put(store, day_prefix(now) + name, body, kind, metadata) for name, (body, kind) in bodies.items()]
    log.info("board snapshot written", day=day_prefix(now), tasks=board.total, actor=actor)
    return SnapshotWritten(bucket=store.bucket_name(REPORTS_BUCKET), day=now.astimezone(UTC).date().isoformat(), taken_at=now,
                           tasks=board.total, objects=written)  # fmt: skip


async def _put(store: ObjectStore, key: str, body: bytes, content_type: str, metadata: dict[str, str]) -> SnapshotObject:
    version = await store.put(REPORTS_BUCKET, key, body, content_type=content_type, metadata=metadata)
    return SnapshotObject(key=key, version_id=version.version_id, size=len(body))


async def list_snapshots(settings: Settings, limit: int) -> list[dict[str, Any]]:
    """Snapshot objects, newest day first: key, size, last modified, and its versions' count."""
    async with open_object_store(settings) as store:
        await store.ensure_bucket(REPORTS_BUCKET)
        objects = await store.list_keys(REPORTS_BUCKET, PREFIX)
        objects = sorted(objects, key=lambda o: o.key, reverse=True)[:limit]
        return [
            {"key": o.key, "size": o.size, "last_modified": o.last_modified.isoformat() if o.last_modified else None,
             "versions": len(await store.list_versions(REPORTS_BUCKET, o.key))}
            for o in objects
        ]  # fmt: skip


async def has_snapshot(settings: Settings, day: datetime) -> bool:
    async with open_object_store(settings) as store:
        await store.ensure_bucket(REPORTS_BUCKET)
        return await store.exists(REPORTS_BUCKET, day_prefix(day) + "board.csv")


def next_run(now: datetime) -> datetime:
    """Shortly after the next UTC midnight."""
    midnight = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), datetime.min.time(), UTC)
    return midnight + AFTER_MIDNIGHT


async def run_daily_board_snapshots(pool: asyncpg.Pool, settings: Settings) -> None:
    """Forever: today's snapshot if missing, then one a day. Errors are logged and retried next round."""
    while True:
        now = datetime.now(UTC)
        try:
            if not await has_snapshot(settings, now):
                await write_board_snapshot(pool, settings, now)
        except Exception as exc:  # noqa: BLE001 - a failed snapshot is retried at the next run; the console keeps serving
            log.error("board snapshot failed; retrying in an hour", error=repr(exc))
            await asyncio.sleep(3600)
            continue
        await asyncio.sleep((next_run(now) - datetime.now(UTC)).total_seconds())

