"""`store.save_changes` on real PostgreSQL: a record the fold read from the book is updated in the
columns it changed (and a lease's unsaved in-memory columns), never rewritten whole; a new one is
inserted whole; events built meanwhile are appended numbered, or fail the step whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta

import asyncpg
import pytest
from pydantic import ValidationError

from services.common.runtime import Emitter, prepare_schema
from services.dispatcher.row_writes import StoredRowMissingError
from services.dispatcher.service import SPEC as DISPATCHER
from services.dispatcher.store import load_leases, load_tasks, save_changes
from shared.delivery.db import create_pool
from shared.events import TaskStarted, parse_event
from shared.events.emission import Emission
from shared.events.reasons import ReleaseReason
from shared.events.states import TaskState
from shared.events.subjects import task_subject
from shared.leasing.records import LeaseBook, LeaseState
from shared.leasing.work import BookChanges
from shared.settings import Settings
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_node_record, a_task_record

pytestmark = pytest.mark.integration

EMITTER = Emitter("dispatcher", "dispatcher/test", "service:dispatcher")


@pytest.fixture
async def conn(fresh_settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    async with await create_pool(fresh_settings.database_dsn or "", min_size=1, max_size=1) as pool:
        await prepare_schema(pool, DISPATCHER)
        async with pool.acquire() as connection:
            yield connection


async def save(conn: asyncpg.Connection, changes: BookChanges, stored: LeaseBook | None = None) -> None:
    async with conn.transaction():
        await save_changes(conn, "dispatcher", EMITTER, changes, stored)


async def test_a_stored_task_is_updated_in_the_columns_that_changed_only(conn: asyncpg.Connection) -> None:
    queued = a_task_record(state=TaskState.QUEUED, run=0, queued_announced=False, labels={"team": "a"})
    await save(conn, BookChanges(tasks={"T1": queued}))
    assert (await load_tasks(conn, "dispatcher", ["T1"]))["T1"] == queued  # new: inserted whole

    # Behind the store's back: a column the next change does not touch. A whole-row write would undo it.
    await conn.execute("UPDATE dispatcher.tasks SET image = 'set-elsewhere' WHERE task_id = 'T1'")
    granted = replace(queued, state=TaskState.LEASED, run=1, updated_at=NOW + timedelta(seconds=1))
    await save(conn, BookChanges(tasks={"T1": granted}), LeaseBook(tasks={"T1": queued}))

    assert (await load_tasks(conn, "dispatcher", ["T1"]))["T1"] == replace(granted, image="set-elsewhere")


async def test_a_lease_update_also_writes_what_a_quiet_renewal_left_in_memory(conn: asyncpg.Connection) -> None:
    lease = a_lease_record()
    await save(conn, BookChanges(tasks={"T1": a_task_record()}, nodes={"n1": a_node_record()}, leases={"L1": lease},
                                 granted=frozenset({"L1"})))
    # The working set's version after a quiet renewal: renewed in memory, not written.
    renewed = replace(lease, expires_at=NOW + timedelta(seconds=60), last_renewed_at=NOW, renewals_unreported=1)
    ended = replace(renewed, state=LeaseState.ENDED, ended_at=NOW, end_reason=ReleaseReason.SUCCEEDED)
    await save(conn, BookChanges(leases={"L1": ended}), LeaseBook(leases={"L1": renewed}))

    assert (await load_leases(conn, "dispatcher", ["L1"]))["L1"] == ended


async def test_an_update_of_a_record_the_table_does_not_hold_fails_the_step(conn: asyncpg.Connection) -> None:
    believed = a_task_record("T-never-stored")
    with pytest.raises(StoredRowMissingError):
        await save(conn, BookChanges(tasks={believed.task_id: replace(believed, run=2)}),
                   LeaseBook(tasks={believed.task_id: believed}))


async def test_events_that_fail_to_build_fail_the_step_and_leave_the_connection_usable(conn: asyncpg.Connection) -> None:
    """The events are built while the records are written (`store.built_meanwhile`): an event that fails
    to build stops the writes, and the step's transaction rolls back whole."""
    task = a_task_record(state=TaskState.QUEUED, run=0)
    broken = Emission(TaskStarted, task_subject("T1"), {"task_id": "T1", "no_such_field": 1})
    good = [Emission(TaskStarted, task_subject(f"T{i}"), {"task_id": f"T{i}", "lease_id": "L1", "node_id": "n1"})
            for i in range(40)]
    with pytest.raises(ValidationError):
        await save(conn, BookChanges(tasks={"T1": task}, emissions=(broken, *good)))

    assert await conn.fetchval("SELECT count(*) FROM dispatcher.tasks") == 0
    assert await conn.fetchval("SELECT count(*) FROM dispatcher.outbox") == 0
    await save(conn, BookChanges(tasks={"T1": task}, emissions=tuple(good)))
    rows = await conn.fetch("SELECT subject, body FROM dispatcher.outbox ORDER BY position")
    assert [row["subject"] for row in rows] == [f"task/T{i}" for i in range(40)]
    assert all(parse_event(row["body"].encode()).subject_seq == 1 for row in rows)
