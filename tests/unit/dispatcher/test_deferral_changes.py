"""Which deferrals of a cycle change a task's row: capacity reasons that flip are coalesced."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from services.dispatcher.persist import _deferral_changes
from services.dispatcher.store import CycleInput
from shared.scheduling.model import Deferral, Snapshot
from shared.scheduling.model import DeferralReason as D

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTLED_BEFORE = NOW - timedelta(seconds=10)


def given(**row: Any) -> CycleInput:
    base = {"state": "queued", "deferral_reason": "no_capacity", "queued_announced": True, "updated_at": NOW}
    return CycleInput(snapshot=Snapshot(nodes=()), queue=[], tasks={"T1": base | row}, nodes={})


def changed(cycle_input: CycleInput, reason: D) -> list[str]:
    return [d.reason.value for d, _ in _deferral_changes(cycle_input, (Deferral("T1", reason, "why"),), SETTLED_BEFORE)]


def test_a_capacity_reason_replacing_a_recent_one_waits() -> None:
    assert changed(given(), D.BEHIND_RESERVATION) == []


def test_a_capacity_reason_replacing_a_settled_one_is_stored() -> None:
    assert changed(given(updated_at=SETTLED_BEFORE - timedelta(seconds=1)), D.HEADROOM) == ["headroom"]


def test_the_first_capacity_reason_and_other_kinds_are_never_held_back() -> None:
    assert changed(given(deferral_reason=None, queued_announced=False), D.NO_CAPACITY) == ["no_capacity"]
    assert changed(given(), D.QUOTA_EXHAUSTED) == ["quota_exhausted"]
    assert changed(given(state="held", deferral_reason="quota_exhausted", queued_announced=False), D.NO_CAPACITY) == [
        "no_capacity"
    ]


def test_an_unchanged_reason_changes_nothing() -> None:
    assert changed(given(updated_at=SETTLED_BEFORE - timedelta(seconds=1)), D.NO_CAPACITY) == []
