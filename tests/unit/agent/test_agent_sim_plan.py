"""Simulated runs: resume progress math, milestones, time scaling, failure injection, output units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.agent.sim_plan import Milestone, checkpoint_uri, plan_sim_run, resume_progress, simulated_util
from shared.events.reports import LeaseGrantOrder


def an_order(**overrides: Any) -> LeaseGrantOrder:
    fields = {
        "agent_id": "a1",
        "lease_id": "L1",
        "task_id": "T1",
        "fencing_token": 1,
        "gpu_indices": (0,),
        "ttl_s": 30,
        "expires_at": datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=1),
        "estimated_runtime_s": 1000.0,
        **overrides,
    }
    return LeaseGrantOrder(**fields)


def test_a_fresh_run_takes_the_estimate_divided_by_the_time_scale() -> None:
    plan = plan_sim_run(an_order(), time_scale=100.0)
    assert plan.start_progress == 0.0
    assert plan.seconds_between(0.0, 1.0) == pytest.approx(10.0)


def test_a_resumed_run_only_runs_the_remaining_share() -> None:
    plan = plan_sim_run(an_order(resume_from="sim://T1/0.400000"), time_scale=100.0)
    assert plan.start_progress == pytest.approx(0.4)
    assert plan.seconds_between(plan.start_progress, 1.0) == pytest.approx(6.0)
    assert plan.output_units(1.0) == pytest.approx(0.6 * 100.0 * 1000.0)  # this run's share only


@pytest.mark.parametrize(
    ("resume_from", "expected"),
    [
        (None, 0.0),
        ("", 0.0),
        ("sim://T1/0.25", 0.25),
        ("sim://T1/1.5", 1.0),
        ("sim://OTHER/0.5", 0.0),  # another task's checkpoint is not ours
        ("s3://bucket/ckpt", 0.0),
        ("sim://T1/nan", 0.0),
        ("sim://T1/abc", 0.0),
    ],
)
def test_resume_progress_reads_only_this_tasks_sim_checkpoints(resume_from: str | None, expected: float) -> None:
    assert resume_progress(resume_from, "T1") == expected


@given(st.floats(min_value=0.0, max_value=1.0, allow_nan=False))
def test_a_checkpoint_uri_resumes_where_it_was_taken(progress: float) -> None:
    assert resume_progress(checkpoint_uri("T1", progress), "T1") == pytest.approx(progress, abs=1e-6)


def test_milestones_checkpoint_at_each_scaled_interval_then_finish() -> None:
    plan = plan_sim_run(an_order(checkpoint_interval_s=250.0), time_scale=10.0, progress_step=None)
    assert plan.milestones() == [
        (0.25, Milestone.CHECKPOINT),
        (0.5, Milestone.CHECKPOINT),
        (0.75, Milestone.CHECKPOINT),
        (1.0, Milestone.DONE),
    ]
    assert plan.seconds_between(0.0, 0.25) == pytest.approx(25.0)  # 250 s interval at 10x


def test_checkpoints_count_from_the_resume_point() -> None:
    plan = plan_sim_run(
        an_order(checkpoint_interval_s=300.0, resume_from="sim://T1/0.5"), time_scale=1.0, progress_step=None
    )
    assert plan.milestones() == [(0.8, Milestone.CHECKPOINT), (1.0, Milestone.DONE)]


def test_failure_injection_ends_the_run_at_that_progress_with_the_exit_code() -> None:
    env = {"CARDFLOW_SIM_FAIL_AT": "0.5", "CARDFLOW_SIM_EXIT_CODE": "3"}
    plan = plan_sim_run(an_order(env=env, checkpoint_interval_s=200.0), time_scale=1.0, progress_step=None)
    milestones = plan.milestones()
    assert milestones[-1] == (0.5, Milestone.FAIL)
    assert all(kind is not Milestone.DONE for _, kind in milestones)
    assert [p for p, kind in milestones if kind is Milestone.CHECKPOINT] == [0.2, 0.4]
    assert plan.exit_code == 3


def test_a_failure_point_already_passed_before_the_resume_is_not_repeated() -> None:
    env = {"CARDFLOW_SIM_FAIL_AT": "0.3"}
    plan = plan_sim_run(an_order(env=env, resume_from="sim://T1/0.6"), time_scale=1.0)
    assert plan.fail_at is None and plan.milestones()[-1] == (1.0, Milestone.DONE)


def test_progress_reports_are_thinned_for_very_fast_runs() -> None:
    slow = plan_sim_run(an_order(), time_scale=1.0, progress_step=0.1, min_report_gap_s=1.0)
    fast = plan_sim_run(an_order(), time_scale=1000.0, progress_step=0.1, min_report_gap_s=1.0)  # 1 s in all
    assert len([m for m in slow.milestones() if m[1] is Milestone.PROGRESS]) == 9
    assert [m for m in fast.milestones() if m[1] is Milestone.PROGRESS] == []


@given(
    start=st.floats(min_value=0.0, max_value=0.99),
    interval=st.floats(min_value=1.0, max_value=2000.0),
    step=st.sampled_from([None, 0.05, 0.1, 0.3]),
)
def test_milestones_are_ordered_after_the_start_and_end_exactly_once(
    start: float, interval: float, step: float | None
) -> None:
    plan = plan_sim_run(
        an_order(checkpoint_interval_s=interval, resume_from=checkpoint_uri("T1", start)), time_scale=5.0,
        progress_step=step, min_report_gap_s=0.0,
    )
    milestones = plan.milestones()
    progresses = [p for p, _ in milestones]
    assert progresses == sorted(progresses)
    assert all(p > plan.start_progress for p in progresses)
    ends = [kind for _, kind in milestones if kind in (Milestone.DONE, Milestone.FAIL)]
    assert ends == [Milestone.DONE] and milestones[-1] == (1.0, Milestone.DONE)


def test_progress_after_elapsed_time_is_capped_at_one() -> None:
    plan = plan_sim_run(an_order(), time_scale=100.0)  # 10 s per task
    assert plan.progress_after(0.2, 5.0) == pytest.approx(0.7)
    assert plan.progress_after(0.2, 60.0) == 1.0


def test_utilisation_override_is_clamped() -> None:
    assert simulated_util({"CARDFLOW_SIM_UTIL": "3"}) == 3.0
    assert simulated_util({"CARDFLOW_SIM_UTIL": "300"}) == 100.0
    assert simulated_util({}) == 90.0
    assert simulated_util({"CARDFLOW_SIM_UTIL": "3"}, {"sim_util_pct": "0"}) == 0.0  # the label wins
    assert simulated_util({}, {"sim_util_pct": "not a number"}) == 90.0
