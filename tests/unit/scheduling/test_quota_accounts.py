"""Quota accounts per card type, each with its own window: which apply, which pay, which hold a task."""

from __future__ import annotations

from shared.scheduling.model import DeferralReason as R

from .builders import HOUR, NOW, a_node, a_quota, a_task, deferrals, grants, reason_of, run

FLEET = [a_node("h").card("H100").free(8), a_node("l").card("L40S").free(8)]


def h100_only(gpu_hours: float, **terms) -> object:
    return a_quota(gpu_hours=gpu_hours, card_type="H100", account_id="acct-h100", **terms)


def test_an_account_of_one_card_type_does_not_hold_work_on_another():
    """The issue's case: a 1-hour H100-only account blocked an L40S task."""
    result = run(FLEET, [a_task("t").gpus(4).on("L40S")], quotas=[h100_only(1.0)], headroom=0.0)
    assert "t" in grants(result)


def test_an_account_of_one_card_type_limits_work_on_that_type():
    result = run(FLEET, [a_task("t").gpus(4).on("H100")], quotas=[h100_only(1.0)], headroom=0.0)
    assert reason_of(result, "t") == R.QUOTA_EXHAUSTED
    assert deferrals(result)["t"].detail == (
        "needs 4.0 GPU-hours on H100; account acct-h100 of project p (H100 only) has 1.0 GPU-hours of quota left")


def test_a_task_falls_back_to_a_card_type_its_quota_allows():
    task = a_task("t").gpus(4).on("H100", "L40S")
    assert grants(run(FLEET, [task], quotas=[h100_only(1.0)], headroom=0.0))["t"].card_type == "L40S"


def test_every_account_in_force_that_applies_is_a_limit():
    """An H100 account and an account of every card type both count H100 work: the smaller one holds it."""
    both = [h100_only(100.0), a_quota(gpu_hours=2.0, account_id="acct-all")]
    result = run(FLEET, [a_task("t").gpus(4).on("H100")], quotas=both, headroom=0.0)
    assert reason_of(result, "t") == R.QUOTA_EXHAUSTED
    assert "account acct-all of project p has 2.0" in deferrals(result)["t"].detail


def test_a_grant_is_charged_to_every_account_that_pays_for_it():
    both = [h100_only(6.0), a_quota(gpu_hours=100.0, account_id="acct-all")]
    tasks = [a_task("a").gpus(4).on("H100").submitted(0.0), a_task("b").gpus(4).on("H100").submitted(1.0),
             a_task("c").gpus(4).on("L40S").submitted(2.0)]
    result = run(FLEET, tasks, quotas=both, headroom=0.0)
    assert set(grants(result)) == {"a", "c"}  # b: the H100 account has 2 of its 6 hours left
    assert reason_of(result, "b") == R.QUOTA_EXHAUSTED


def test_an_expired_account_covers_nothing_even_beside_one_of_another_card_type():
    quotas = [a_quota(valid_to=NOW - 1, account_id="old"), h100_only(100.0)]
    result = run(FLEET, [a_task("t").on("L40S")], quotas=quotas, headroom=0.0)
    assert reason_of(result, "t") == R.QUOTA_EXPIRES
    assert deferrals(result)["t"].detail == "the quota of account old of project p has expired"


def test_an_expired_account_beside_one_in_force_no_longer_counts():
    quotas = [a_quota(gpu_hours=0.5, valid_to=NOW - 1, account_id="old"), a_quota(gpu_hours=10.0, account_id="new")]
    assert "t" in grants(run(FLEET, [a_task("t").gpus(4)], quotas=quotas, headroom=0.0))


def test_the_account_in_force_must_outlast_the_task_even_if_a_later_one_follows():
    quotas = [a_quota(valid_to=NOW + HOUR, account_id="now"), a_quota(valid_from=NOW + HOUR, account_id="next")]
    result = run(FLEET, [a_task("t").runs(2 * HOUR)], quotas=quotas, headroom=0.0, quota_expiry_margin_s=0.0)
    assert reason_of(result, "t") == R.QUOTA_EXPIRES
    assert "account now of project p" in deferrals(result)["t"].detail


def test_only_accounts_that_start_later_mean_not_yet_valid():
    result = run(FLEET, [a_task("t")], quotas=[a_quota(valid_from=NOW + 2 * HOUR, card_type="H100",
                                                       account_id="soon")], headroom=0.0)
    assert reason_of(result, "t") == R.QUOTA_NOT_YET_VALID
    assert deferrals(result)["t"].detail == "the quota of account soon of project p (H100 only) becomes valid in 2h00m"
