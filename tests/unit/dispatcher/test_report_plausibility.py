"""Is a report believable? (`shared.leasing.plausibility` inside `apply_reports`): tables over the pure fold.

Issue 15 item 2: "A report 'succeeded, output 1e9' with a valid token for a task that had run 20 s
of 2 hours was accepted." A success before the policy's share of the estimate (agent time) is
flagged; output beyond the policy's bound is refused; neither stops the task from succeeding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from shared.events.reasons import SuccessFlag
from shared.events.reports import TaskProgress
from shared.events.states import TaskState
from shared.leasing.plausibility import early_success, output_bound
from shared.leasing.records import LeaseBook, LeaseState
from shared.leasing.report_fold import apply_reports
from shared.leasing.report_limits import ReportLimits
from shared.leasing.work import LeaseRules
from shared.events.reasons import ReleaseReason
from shared.scheduling.model import CardOption
from tests.unit.dispatcher.builders import (
    NOW,
    _report,
    a_book,
    a_lease_record,
    a_node_record,
    a_task_record,
    checkpointed,
    finished,
)

TWO_HOURS = 7200.0
EARLY = SuccessFlag.IMPLAUSIBLY_EARLY_SUCCESS.value
BOUNDS = SuccessFlag.OUTPUT_OUT_OF_BOUNDS.value


def a_book_of(*, ran_s: float, scale: float = 1.0, estimate_s: float = TWO_HOURS, unit: str | None = None,
              gpus: int = 1, **lease: Any) -> LeaseBook:
    """T1 (estimated `estimate_s` on H100) running under L1, granted `ran_s` real seconds before NOW."""
    task = a_task_record(options=(CardOption("H100", estimate_s, 1.0),), output_unit=unit, state=TaskState.RUNNING)
    return a_book(a_node_record(time_scale=scale), task,
                  a_lease_record(granted_at=NOW - timedelta(seconds=ran_s), started=True, gpus=tuple(range(gpus)),
                                 estimated_end=NOW + timedelta(hours=2), **lease))


def limits(**changes: Any) -> LeaseRules:
    return LeaseRules(reports=ReportLimits(**changes))


@dataclass(frozen=True)
class Judged:
    """What a clean finish became, in words a table can hold."""

    state: str
    flags: tuple[str, ...]
    output: float | None
    claimed: float | None


def finish(book: LeaseBook, output: float | None, rules: LeaseRules = LeaseRules(), exit_code: int = 0) -> Judged:
    effects = apply_reports(book, [finished("a1", "L1", "T1", 7, exit_code=exit_code, output_units=output)], NOW, rules)
    task = effects.changes.tasks["T1"]
    [end] = [e.data for e in effects.changes.emissions if e.event_type.__name__ in ("TaskSucceeded", "TaskFailed")]
    assert set(end.get("flags", [])) <= task.flags  # the task's row carries the flags its event carries
    return Judged(task.state.value, tuple(end.get("flags", ())), end.get("output_units"), end.get("claimed_output_units"))


CASES: list[tuple[str, dict[str, Any], float | None, LeaseRules, Judged]] = [
    # (case, book, claimed output, rules, what the success became)
    ("the issue: succeeded with output 1e9 after 20 s of a 2-hour task -> flagged twice, output refused",
     dict(ran_s=20), 1e9, LeaseRules(), Judged("succeeded", (EARLY, BOUNDS), None, 1e9)),
    ("an honest run of the whole estimate: believed", dict(ran_s=TWO_HOURS), 5e5, LeaseRules(),
     Judged("succeeded", (), 5e5, None)),
    ("exactly the policy's share (5% of 2 h = 6 min): believed", dict(ran_s=360), 10.0, LeaseRules(),
     Judged("succeeded", (), 10.0, None)),
    ("just under the share: flagged, output kept (within the bound)", dict(ran_s=359), 10.0, LeaseRules(),
     Judged("succeeded", (EARLY,), 10.0, None)),
    ("a simulated x600 agent that ran 12 s real = 2 h of its time: believed", dict(ran_s=12, scale=600), 3.6e5,
     LeaseRules(), Judged("succeeded", (), 3.6e5, None)),
    ("a simulated x600 agent after 0.5 s real = 5 min of its time (4%): flagged", dict(ran_s=0.5, scale=600), None,
     LeaseRules(), Judged("succeeded", (EARLY,), None, None)),
    ("a run resumed from a checkpoint is not judged early (earlier runs did part of the work)",
     dict(ran_s=20, resume_from="s3://b/ck"), 100.0, LeaseRules(), Judged("succeeded", (), 100.0, None)),
    ("min_success_share 0 turns the early rule off", dict(ran_s=20), None, limits(min_success_share=0),
     Judged("succeeded", (), None, None)),
    ("the bound counts at least the estimate's GPU-hours: 1.5e8 in 20 s of a 2-h task passes (1e8/GPU-h x 2 h)",
     dict(ran_s=20), 1.5e8, LeaseRules(), Judged("succeeded", (EARLY,), 1.5e8, None)),
    ("two GPUs may claim twice as much", dict(ran_s=TWO_HOURS, gpus=2), 3e8, LeaseRules(),
     Judged("succeeded", (), 3e8, None)),
    ("one GPU may not", dict(ran_s=TWO_HOURS), 3e8, LeaseRules(), Judged("succeeded", (BOUNDS,), None, 3e8)),
    ("a bound per output unit: tokens may claim 1e10 per GPU-hour", dict(ran_s=TWO_HOURS, unit="tokens"), 1e9,
     limits(max_output_units_per_gpu_hour_by_unit={"tokens": 1e10}), Judged("succeeded", (), 1e9, None)),
    ("the default applies to other units", dict(ran_s=TWO_HOURS, unit="samples"), 1e9,
     limits(max_output_units_per_gpu_hour_by_unit={"tokens": 1e10}), Judged("succeeded", (BOUNDS,), None, 1e9)),
    ("tokens have a bound of their own by default: 1e9 per GPU-hour", dict(ran_s=TWO_HOURS, unit="tokens"), 1.5e9,
     LeaseRules(), Judged("succeeded", (), 1.5e9, None)),
    ("max_output_units_per_gpu_hour 0: no bound", dict(ran_s=TWO_HOURS), 1e15, limits(max_output_units_per_gpu_hour=0),
     Judged("succeeded", (), 1e15, None)),
]


@pytest.mark.parametrize(("case", "book", "output", "rules", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_clean_finish_is_judged(case: str, book: dict[str, Any], output: float | None, rules: LeaseRules,
                                  expected: Judged) -> None:
    assert finish(a_book_of(**book), output, rules) == expected


def test_a_failure_is_not_judged() -> None:
    assert finish(a_book_of(ran_s=20), 1e9, exit_code=1) == Judged("failed", (), None, None)


def test_the_flag_says_why_in_a_sentence() -> None:
    effects = apply_reports(a_book_of(ran_s=20), [finished("a1", "L1", "T1", 7, output_units=1e9)], NOW, LeaseRules())
    [data] = [e.data for e in effects.changes.emissions if e.event_type.__name__ == "TaskSucceeded"]
    assert "after 20s of its agent's time, 0.3% of the task's estimated 2h00m on H100" in data["flag_detail"]
    assert "claimed 1e+09 of output; the policy allows 1e+08 per GPU-hour" in data["flag_detail"]
    assert not effects.rejected  # the finish itself was accepted: the lease ended, the task succeeded
    assert effects.changes.leases["L1"].end_reason is ReleaseReason.SUCCEEDED


def test_a_late_reconciled_success_is_judged_alike() -> None:
    book = a_book_of(ran_s=20, state=LeaseState.ENDED, ended_at=NOW, end_reason=ReleaseReason.EXPIRED)
    assert finish(book, 1e9) == Judged("succeeded", (EARLY, BOUNDS), None, 1e9)


def progress_with_output(units: float) -> TaskProgress:
    return _report(TaskProgress, "a1", {"lease_id": "L1", "task_id": "T1", "fencing_token": 7, "progress": 0.4,
                                        "output_units": units})


def test_progress_beyond_the_bound_is_applied_without_its_output() -> None:
    book = a_book_of(ran_s=600)
    effects = apply_reports(book, [progress_with_output(12.0)], NOW, LeaseRules())
    book = replace(book, leases={**book.leases, **effects.changes.leases})
    effects = apply_reports(book, [progress_with_output(1e12)], NOW + timedelta(seconds=10), LeaseRules())
    lease = effects.changes.leases["L1"]
    assert (lease.progress, lease.output_units) == (0.4, 12.0)  # progress kept, the claim not
    [row] = effects.rejected
    assert (row.refusal.reason.value, row.count) == ("output_out_of_bounds", 1) and "1e+12" in row.refusal.detail
    book = replace(book, leases={**book.leases, **effects.changes.leases})
    effects = apply_reports(book, [checkpointed("a1", "L1", "T1", 7, "s3://b/c")], NOW + timedelta(minutes=2),
                            LeaseRules())
    [event] = [e.data for e in effects.changes.emissions if e.event_type.__name__ == "TaskCheckpointed"]
    assert event["output_units"] == 12.0  # the ledger hears only the bounded output


def test_the_bound_and_the_share_in_the_agents_time() -> None:
    lease, node = a_lease_record(granted_at=NOW - timedelta(seconds=6)), a_node_record(time_scale=600)
    task = a_task_record(options=(CardOption("H100", TWO_HOURS, 1.0),))
    assert early_success(lease, task, node, NOW, ReportLimits()) is None  # 6 s x600 = 1 h of 2 h
    rules = ReportLimits(max_output_units_per_gpu_hour=10.0)
    assert output_bound(lease, task, node, NOW + timedelta(seconds=12), rules) == (30.0, 10.0, 3.0)  # 18 s x600 = 3 h > 2 h
