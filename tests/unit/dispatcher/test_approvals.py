"""Approvals (`shared.leasing.approvals`): which tasks need a reviewer, and what a review does — no PostgreSQL."""

from __future__ import annotations

import pytest

from shared.config.governance import ApprovalRule, ReviewersSection
from shared.events.states import TaskState
from shared.leasing.approvals import approval_needed, explain_approvals, gate_queue
from shared.leasing.records import LeaseBook
from shared.leasing.task_facets import apply_events
from shared.leasing.work import LeaseRules
from shared.scheduling.model import CardOption, DeferralReason, Node, PriorityClass, Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.plan import plan
from tests.unit.dispatcher.builders import NOW, a_book, a_task_record, reviewed, submitted

RULES = LeaseRules()
BIG = ApprovalRule(name="big-spend", cost_above=100.0)
CORE_VISION = ApprovalRule(name="core-vision", priority_class=PriorityClass.CORE, projects=("vision",))
H100_LONG = ApprovalRule(name="h100-long", card_types=("H100",), gpu_hours_above=8.0)


def queued(task_id: str = "T1", **changes) -> object:  # noqa: ANN003
    return a_task_record(task_id, state=TaskState.HELD, **changes).queued_task()


@pytest.mark.parametrize(("task", "rules", "matched"), [
    (queued(options=(CardOption("H100", 3600.0, 150.0),)), [BIG], ["big-spend"]),
    (queued(options=(CardOption("H100", 3600.0, 100.0),)), [BIG], []),  # "above": 100 is not above 100
    (queued(project="vision", priority_class=PriorityClass.CORE), [CORE_VISION], ["core-vision"]),
    (queued(project="speech", priority_class=PriorityClass.CORE), [CORE_VISION], []),
    (queued(project="vision", priority_class=PriorityClass.STANDARD), [CORE_VISION], []),
    (queued(gpus=4, options=(CardOption("H100", 3 * 3600.0, 1.0),)), [H100_LONG], ["h100-long"]),
    (queued(gpus=4, options=(CardOption("L40S", 3 * 3600.0, 1.0),)), [H100_LONG], []),  # only on the chosen card
    (queued(options=()), [BIG, CORE_VISION], []),  # not matched yet: nothing to judge
])
def test_approval_needed(task, rules, matched) -> None:  # noqa: ANN001
    assert [rule.name for rule in approval_needed(task, rules)] == matched


def test_a_rule_without_a_condition_is_refused() -> None:
    with pytest.raises(ValueError, match="sets no condition"):
        ApprovalRule(name="everything")


def test_an_unapproved_task_that_needs_approval_holds_no_gpu_and_no_quota() -> None:
    big = queued("T1", options=(CardOption("H100", 3600.0, 150.0),))
    small = queued("T2")
    gated = gate_queue([big, small], approved=set(), rules=[BIG])
    assert [t.approved for t in gated] == [False, True]
    decided = plan(Snapshot((Node("n1", "H100", 8, frozenset(range(8))),)), gated, Policy(), NOW.timestamp())
    assert [g.task_id for g in decided.grants] == ["T2"]
    (deferral,) = explain_approvals(decided, gated, [BIG], ReviewersSection(by_project={"proj-a": ("rita",)})).deferrals
    assert deferral.reason is DeferralReason.NOT_APPROVED
    assert deferral.detail == ("it waits for approval (rule big-spend: estimated cost 150.00 > 100.00); "
                               "who may approve: rita (not its submitter)")
    assert gate_queue([big], approved={"T1"}, rules=[BIG])[0].approved


def held_for_approval(**changes) -> LeaseBook:  # noqa: ANN003
    held = {"state": TaskState.HELD, "deferral_reason": DeferralReason.NOT_APPROVED, "submitted_by": "user:sam"}
    return a_book(a_task_record("T1", **(held | changes)))


def test_an_approval_is_kept_and_announced_with_the_reviewer_as_actor() -> None:
    effects = apply_events(held_for_approval(), [reviewed("T1", reason="budget ok")], NOW, RULES)
    assert effects.changes.tasks["T1"].approved_by == "user:rita"
    (approved,) = effects.changes.emissions
    assert (approved.event_type.__name__, approved.data["note"], approved.actor_or("service:dispatcher")) == (
        "TaskApproved", "budget ok", "user:rita")
    assert effects.wake and not effects.refused


def test_a_denial_cancels_the_task() -> None:
    effects = apply_events(held_for_approval(), [reviewed("T1", "deny", reason="too costly")], NOW, RULES)
    task = effects.changes.tasks["T1"]
    assert task.state is TaskState.CANCELLED and not task.in_queue
    assert [e.event_type.__name__ for e in effects.changes.emissions] == ["TaskDenied", "TaskCancelled"]
    assert effects.changes.emissions[1].data["reason"] == "denied by user:rita: too costly"


@pytest.mark.parametrize(("book", "review", "why"), [
    (held_for_approval(submitted_by="user:rita"), reviewed("T1"), "user:rita may not review task T1: they submitted it"),
    (a_book(a_task_record("T1")), reviewed("T1"), "task T1 is leased: only a waiting task is reviewed"),
    (a_book(a_task_record("T1", state=TaskState.QUEUED)), reviewed("T1", "deny"),
     "task T1 does not wait for approval (queued): it cannot be denied"),
    (LeaseBook(), reviewed("T9"), "task T9 is not known: no review"),
])
def test_reviews_that_are_refused(book: LeaseBook, review, why: str) -> None:  # noqa: ANN001
    effects = apply_events(book, [review], NOW, RULES)
    assert effects.refused == (why,)
    assert not effects.changes.emissions and all(t.approved_by is None for t in effects.changes.tasks.values())


def test_the_submitter_is_recorded_from_the_submission() -> None:
    event = submitted("T1").model_copy(update={"actor": "user:sam"})
    assert apply_events(LeaseBook(), [event], NOW, RULES).changes.tasks["T1"].submitted_by == "user:sam"
