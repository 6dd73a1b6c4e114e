"""Eligibility and quota: every reason a task cannot be considered, with a sentence a person understands."""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R

from .builders import HOUR, NOW, a_node, a_quota, a_task, deferrals, grants, reason_of, run

FLEET = [a_node("n1").free(8)]


@pytest.mark.parametrize(
    ("task", "reason", "words"),
    [
        (a_task("t").not_ready(), R.DATA_NOT_READY, "data is not ready"),
        (a_task("t").unmatched(), R.UNMATCHED, "no adequate card type"),
        (a_task("t").unapproved(), R.NOT_APPROVED, "approval"),
        (a_task("t").not_ready().unmatched(), R.DATA_NOT_READY, "data"),  # data is checked first
        (a_task("t").unmatched().unapproved(), R.UNMATCHED, "matched"),
    ],
)
def test_ineligible_tasks_are_deferred_with_reason_and_sentence(task, reason, words):
    result = run(FLEET, [task], headroom=0.0)
    assert not result.grants
    assert reason_of(result, "t") == reason
    assert words in deferrals(result)["t"].detail


def test_readiness_blind_policy_starts_a_task_whose_data_is_not_ready():
    result = run(FLEET, [a_task("t").not_ready()], headroom=0.0, readiness_gate=False)
    assert "t" in grants(result)


def test_quota_covers_the_estimate_on_the_chosen_card():
    task = a_task("t").gpus(4).on(("H100", 2 * HOUR))  # 8 GPU-hours
    assert "t" in grants(run(FLEET, [task], quotas=[a_quota(gpu_hours=8.0)], headroom=0.0))
    result = run(FLEET, [task], quotas=[a_quota(gpu_hours=7.9)], headroom=0.0)
    assert reason_of(result, "t") == R.QUOTA_EXHAUSTED
    assert deferrals(result)["t"].detail == (
        "needs 8.0 GPU-hours on H100; project p has 7.9 GPU-hours of quota left"
    )


def test_grants_earlier_in_the_same_cycle_use_up_the_quota():
    tasks = [a_task("first").gpus(2).priority(2), a_task("second").gpus(2).priority(1)]
    result = run(FLEET, tasks, quotas=[a_quota(gpu_hours=3.0)], headroom=0.0)
    assert list(grants(result)) == ["first"]
    assert reason_of(result, "second") == R.QUOTA_EXHAUSTED


def test_other_projects_and_projects_without_account_are_not_limited():
    tasks = [a_task("mine").project("a").gpus(2), a_task("free").project("b").gpus(2)]
    result = run(FLEET, tasks, quotas=[a_quota("a", gpu_hours=1.0)], headroom=0.0)
    assert list(grants(result)) == ["free"]
    assert reason_of(result, "mine") == R.QUOTA_EXHAUSTED


def test_quota_expiring_before_the_estimated_end_plus_margin_holds_the_task():
    quota = a_quota(valid_to=NOW + 2 * HOUR)
    ok = run(FLEET, [a_task("t").runs(HOUR)], quotas=[quota], headroom=0.0, quota_expiry_margin_s=HOUR)
    assert "t" in grants(ok)
    late = run(FLEET, [a_task("t").runs(HOUR + 1)], quotas=[quota], headroom=0.0, quota_expiry_margin_s=HOUR)
    assert reason_of(late, "t") == R.QUOTA_EXPIRES
    assert "expires in 2h00m" in deferrals(late)["t"].detail


def test_a_faster_card_may_fit_before_the_quota_expires():
    quota = a_quota(valid_to=NOW + 3 * HOUR)
    task = a_task("t").on(("A10", 5 * HOUR), ("H100", HOUR))
    result = run([a_node("a").card("A10"), a_node("h").card("H100")], [task], quotas=[quota],
                 headroom=0.0, quota_expiry_margin_s=HOUR)
    assert grants(result)["t"].card_type == "H100"


def test_expired_and_not_yet_valid_quotas():
    expired = run(FLEET, [a_task("t")], quotas=[a_quota(valid_to=NOW - 1)], headroom=0.0)
    assert reason_of(expired, "t") == R.QUOTA_EXPIRES
    assert "has expired" in deferrals(expired)["t"].detail
    future = run(FLEET, [a_task("t")], quotas=[a_quota(valid_from=NOW + HOUR)], headroom=0.0)
    assert reason_of(future, "t") == R.QUOTA_NOT_YET_VALID
    assert "becomes valid in 1h00m" in deferrals(future)["t"].detail


def test_expiry_gate_off_ignores_the_expiry_date_but_not_the_amount():
    quota = a_quota(valid_to=NOW + HOUR, gpu_hours=3.0)
    past_expiry = a_task("t").runs(2 * HOUR)
    assert reason_of(run(FLEET, [past_expiry], quotas=[quota], headroom=0.0), "t") == R.QUOTA_EXPIRES
    assert "t" in grants(run(FLEET, [past_expiry], quotas=[quota], headroom=0.0, quota_expiry_gate=False))
    too_much = a_task("t").runs(5 * HOUR)
    result = run(FLEET, [too_much], quotas=[quota], headroom=0.0, quota_expiry_gate=False)
    assert reason_of(result, "t") == R.QUOTA_EXHAUSTED
