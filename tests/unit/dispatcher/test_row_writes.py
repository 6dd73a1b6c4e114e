"""Which columns the dispatcher writes for a changed record (`row_writes`): only what changed, plus
what memory may hold unsaved."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from services.dispatcher.row_writes import Table, _update_sql, changed_columns, columns_to_update
from services.dispatcher.store import LEASE_COLUMNS, LEASE_IN_MEMORY_ONLY, TASK_COLUMNS, tables
from shared.events.reasons import ReleaseReason
from shared.events.states import TaskState
from shared.leasing.records import LeaseState
from shared.leasing.report_fold import apply_reports
from shared.leasing.work import LeaseRules
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_running_lease_book, a_task_record, heartbeat

TASKS, _, LEASES = tables("dispatcher")


def test_a_grant_writes_the_task_columns_it_changed_and_no_other() -> None:
    queued = a_task_record(state=TaskState.QUEUED, run=0, queued_announced=False)
    granted = replace(queued, state=TaskState.LEASED, run=1, updated_at=NOW)
    assert columns_to_update(TASKS, [granted], {"T1": queued}) == {"state", "run", "updated_at"}


def test_the_columns_of_a_batch_are_every_column_one_of_its_records_changed() -> None:
    one, two = a_task_record("T1"), a_task_record("T2")
    changed = [replace(one, state=TaskState.SUCCEEDED), replace(two, flags=frozenset({"implausibly_early_success"}))]
    assert columns_to_update(TASKS, changed, {"T1": one, "T2": two}) == {"state", "flags"}


def test_an_unchanged_record_writes_nothing() -> None:
    task = a_task_record()
    assert columns_to_update(TASKS, [replace(task)], {"T1": task}) == frozenset()


def test_a_json_column_equal_in_value_is_not_written() -> None:
    task = a_task_record(env={"A": "1"}, labels={"team": "x"})
    copy = replace(task, env={"A": "1"}, labels={"team": "x"}, command=list(task.command or []))
    assert changed_columns(TASKS, task, copy) == frozenset()


def test_every_lease_update_writes_what_memory_may_hold_unsaved() -> None:
    lease = a_lease_record()
    ended = replace(lease, state=LeaseState.ENDED, ended_at=NOW, end_reason=ReleaseReason.SUCCEEDED)
    assert columns_to_update(LEASES, [ended], {"L1": lease}) == {"state", "ended_at", "end_reason"} | LEASE_IN_MEMORY_ONLY


def test_what_a_quiet_renewal_changes_is_written_with_the_next_update_of_the_lease() -> None:
    """A heartbeat within `renewal_event_every_s` of the last `lease.renewed` changes the lease in memory
    only; whatever columns that touches must be among those every update writes."""
    book = a_running_lease_book()
    lease = replace(book.leases["L1"], started=True, renewal_reported_at=NOW - timedelta(seconds=1),
                    granted_at=NOW - timedelta(hours=1))
    book = replace(book, leases={"L1": lease})
    effects = apply_reports(book, [heartbeat("a1", "n1", [("L1", "T1", 7)], utilisation=[3.0])], NOW, LeaseRules())
    quiet = effects.changes.quiet_leases["L1"]
    assert "L1" not in effects.changes.leases
    touched = changed_columns(Table("leases", "lease_id", LEASE_COLUMNS), lease, quiet)
    assert {"expires_at", "util_readings"} <= touched <= LEASE_IN_MEMORY_ONLY


def test_the_update_sends_the_key_and_the_changed_columns_only() -> None:
    sql = _update_sql(TASKS, frozenset({"state", "env"}))
    assert sql == ('UPDATE "dispatcher".tasks AS t SET env = x.env::jsonb, state = x.state FROM unnest($1::text[],'
                   ' $2::text[], $3::text[]) AS x(task_id, env, state) WHERE t.task_id = x.task_id')
    assert len(TASK_COLUMNS) == 34
