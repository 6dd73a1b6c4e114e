"""Which deferrals of a cycle change a task's row: capacity reasons wait until the row settled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from services.dispatcher.persist import _deferral_changes
from services.dispatcher.store import CycleInput
from shared.scheduling.model import Deferral, Snapshot
from shared.scheduling.model import DeferralReason as D

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTLED_BEFORE = NOW - timedelta(seconds=10)
SETTLED = SETTLED_BEFORE - timedelta(seconds=1)


def given(**row: Any) -> CycleInput:
    base = {"state": "queued", "deferral_reason": "no_capacity", "queued_announced": True, "updated_at": NOW}
    return CycleInput(snapshot=Snapshot(nodes=()), queue=[], tasks={"T1": base | row}, nodes={})


def changed(cycle_input: CycleInput, reason: D) -> list[tuple[str | None, bool, bool]]:
    """(stored reason, task.queued?, task.held?) of each change."""
    changes = _deferral_changes(cycle_input, (Deferral("T1", reason, "why"),), SETTLED_BEFORE)
    return [(stored, change.announce_queued, change.publish_held) for _, change, stored in changes]


def test_a_newly_eligible_task_is_announced_without_a_capacity_reason_yet() -> None:
    assert changed(given(deferral_reason=None, queued_announced=False), D.NO_CAPACITY) == [(None, True, False)]
    held_by_quota = given(state="held", deferral_reason="quota_exhausted", queued_announced=False, updated_at=SETTLED)
    assert changed(held_by_quota, D.HEADROOM) == [(None, True, False)]


def test_a_capacity_reason_is_published_once_the_row_settled() -> None:
    assert changed(given(deferral_reason=None), D.NO_CAPACITY) == []
    assert changed(given(deferral_reason=None, updated_at=SETTLED), D.NO_CAPACITY) == [("no_capacity", False, True)]


def test_capacity_reasons_that_flip_are_coalesced() -> None:
    assert changed(given(), D.BEHIND_RESERVATION) == []
    assert changed(given(updated_at=SETTLED), D.HEADROOM) == [("headroom", False, True)]


def test_holds_and_data_reasons_are_never_held_back() -> None:
    assert changed(given(), D.QUOTA_EXHAUSTED) == [("quota_exhausted", False, True)]
    assert changed(given(), D.DATA_NOT_READY) == [("data_not_ready", False, False)]


def test_an_unchanged_reason_changes_nothing() -> None:
    assert changed(given(updated_at=SETTLED), D.NO_CAPACITY) == []
