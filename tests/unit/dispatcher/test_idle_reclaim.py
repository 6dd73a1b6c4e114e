"""Idle reclaim (`shared.leasing.idle`, in `apply_reports` and the lease end): tables, no PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.events.reasons import RequeueReason, RevokeReason
from shared.events.states import TaskState
from shared.leasing.idle import IdleRule, due_for_reclaim, observe
from shared.leasing.records import LeaseBook
from shared.leasing.report_fold import apply_reports
from shared.leasing.work import LeaseRules
from shared.scheduling.model import DeferralReason
from tests.unit.dispatcher.builders import (
    NOW,
    a_book,
    a_lease_record,
    a_node_record,
    a_task_record,
    finished,
    heartbeat,
)

RULE = IdleRule(enabled=True, threshold_pct=5.0, window_s=60.0, grace_s=30.0, hold_after=2)
RULES = LeaseRules(renewal_event_every_s=5.0, idle=RULE)
HELD = [("L1", "T1", 7)]
S = timedelta(seconds=1)


def lease(**changes):  # noqa: ANN003, ANN201
    """L1: 2 GPUs, granted 5 minutes ago, last heard 10 s ago."""
    base = a_lease_record("L1", "T1", gpus=(0, 1), granted_at=NOW - 300 * S, last_renewed_at=NOW - 10 * S)
    return replace(base, **changes)


@pytest.mark.parametrize(("before", "util", "idle_s", "idle_since"), [
    (lease(), 2.0, 20.0, NOW),  # idle: 2 GPUs x 10 s, and an idle run starts now
    (lease(idle_since=NOW - 40 * S), 2.0, 20.0, NOW - 40 * S),  # the run goes on
    (lease(idle_since=NOW - 40 * S), 50.0, 0.0, None),  # busy again: the run ends
    (lease(granted_at=NOW - 20 * S, last_renewed_at=None), 0.0, 40.0, None),  # inside the grace: counted, no run
    (lease(idle_since=NOW - 40 * S), None, 0.0, NOW - 40 * S),  # no reading: nothing changes
])
def test_observe(before, util, idle_s, idle_since) -> None:  # noqa: ANN001
    after = observe(before, util, NOW, RULE)
    assert (after.idle_gpu_seconds, after.idle_since) == (idle_s, idle_since)
    assert after.util_readings == (0 if util is None else 1)


def test_heartbeats_applied_together_each_count_the_time_they_cover_on_redis_clock() -> None:
    # Two heartbeats read in one batch (the dispatcher behind): the first busy, reaching the stream 8 s
    # after the last one heard; the second idle, 2 s after it. The idle one stands for those 2 s, though
    # both are applied at the same moment (before: 0 s, since the first renewal had just been applied).
    busy, idle = (heartbeat("a1", "n1", HELD, utilisation=[u, u]) for u in (90.0, 1.0))
    start = lease(last_heard_at=NOW - 10 * S)
    effects = apply_reports(a_book(a_node_record(gpus=2), a_task_record("T1", state=TaskState.RUNNING), start),
                            [busy, idle], NOW, RULES, {busy.event_id: NOW - 2 * S, idle.event_id: NOW})
    [renewed] = [e for e in effects.changes.emissions if e.event_type.model_fields["type"].default == "lease.renewed"]
    assert renewed.data["idle_gpu_seconds"] == 0.0  # the busy one's event; the idle one's 2 GPUs x 2 s wait for the next
    assert effects.changes.leases["L1"].idle_gpu_seconds == 2 * 2.0


def test_a_lease_idle_for_the_window_is_due_unless_reclaim_is_off() -> None:
    assert due_for_reclaim(lease(idle_since=NOW - 60 * S), NOW, RULE)
    assert not due_for_reclaim(lease(idle_since=NOW - 59 * S), NOW, RULE)
    assert not due_for_reclaim(lease(idle_since=NOW - 600 * S), NOW, replace(RULE, enabled=False))


def book(**task) -> LeaseBook:  # noqa: ANN003
    return a_book(a_node_record(gpus=2), a_task_record("T1", state=TaskState.RUNNING, **task),
                  lease(idle_since=NOW - 55 * S, started=True))


def kinds(effects) -> list[str]:  # noqa: ANN001
    return [e.event_type.model_fields["type"].default for e in effects.changes.emissions]


def test_an_idle_heartbeat_past_the_window_revokes_the_lease_after_a_checkpoint() -> None:
    effects = apply_reports(book(), [heartbeat("a1", "n1", HELD, utilisation=[1.0, 3.0])], NOW + 5 * S, RULES)
    assert kinds(effects) == ["command.revoke", "lease.renewed", "lease.revoked"]
    command, renewed, revoked = effects.changes.emissions
    assert command.data["reason"] is RevokeReason.RECLAIMED_IDLE and "checkpoint_first" not in command.data  # default: True
    assert revoked.data["detail"] == "its GPUs (0, 1 on n1) stayed under 5% utilisation for 60 s (window 60 s)"
    assert (renewed.data["gpu_util_pct"], renewed.data["idle_gpu_seconds"]) == (2.0, 2 * 15.0)
    assert effects.changes.leases["L1"].revoke_reason is RevokeReason.RECLAIMED_IDLE


def test_a_busy_gpu_keeps_the_lease() -> None:
    effects = apply_reports(book(), [heartbeat("a1", "n1", HELD, utilisation=[1.0, 90.0])], NOW + 5 * S, RULES)
    assert "lease.revoked" not in kinds(effects)


def reclaimed(**task) -> LeaseBook:  # noqa: ANN003
    ending = lease(revoke_reason=RevokeReason.RECLAIMED_IDLE, idle_gpu_seconds=30.0, started=True)
    return a_book(a_node_record(gpus=2), a_task_record("T1", state=TaskState.RUNNING, **task), ending)


def test_the_reclaimed_task_is_requeued_from_its_checkpoint_and_counts_the_reclaim() -> None:
    effects = apply_reports(reclaimed(resume_from="sim://T1/0.4"), [finished("a1", "L1", "T1", 7, exit_code=None,
                                                                            error="revoked: reclaimed_idle")], NOW, RULES)
    task = effects.changes.tasks["T1"]
    assert (task.state, task.reclaims, task.in_queue) == (TaskState.QUEUED, 1, True)
    requeued = next(e for e in effects.changes.emissions if e.data.get("reason") is RequeueReason.RECLAIMED_IDLE)
    assert requeued.data["resume_from"] == "sim://T1/0.4"
    released = next(e for e in effects.changes.emissions if "ended_at" in e.data)
    assert released.data["idle_gpu_seconds"] == 30.0 and effects.capacity_changed


def test_after_repeated_reclaims_the_task_is_held_for_a_person() -> None:
    effects = apply_reports(reclaimed(reclaims=1), [finished("a1", "L1", "T1", 7, exit_code=None,
                                                             error="revoked: reclaimed_idle")], NOW, RULES)
    task = effects.changes.tasks["T1"]
    assert (task.state, task.reclaims, task.deferral_reason) == (TaskState.HELD, 2, DeferralReason.REPEATEDLY_IDLE)
    assert not task.in_queue  # plan() never sees it: a person releases or cancels it
    assert kinds(effects)[-2:] == ["task.requeued", "task.held"]
