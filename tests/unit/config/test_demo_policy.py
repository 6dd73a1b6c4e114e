"""The demo's policy as recorded changes (pure): what `cardflow up --demo` puts in force, what a later
start without --demo takes back, and what it leaves alone."""

from __future__ import annotations

import pytest

from shared.config import POLICY, policy_seed_text, set_values, validate_document
from shared.config.demo_policy import (
    DEMO_ACTOR,
    DEMO_APPROVAL_RULE,
    DEMO_REVIEWER,
    PolicyVersion,
    demo_end,
    demo_start,
    demo_state,
    is_demo_change,
    values_of,
)
from shared.scheduling.policy_knobs import Policy

GRACE = "preemption.after_s"


def history(*steps: tuple[bool, float]) -> list[PolicyVersion]:
    """Versions 1..n: (written by the demo's start?, the preemption grace of that version)."""
    return [PolicyVersion(n, demo, {GRACE: grace}) for n, (demo, grace) in enumerate(steps, start=1)]


def test_a_demo_start_scales_the_grace_and_says_why() -> None:
    change = demo_start(history((False, 600.0)), time_scale=360)
    assert change is not None
    assert change.assignments == (f"{GRACE}=1.67",)
    assert change.reason.startswith("cardflow up --demo: the demo's agents run 360x faster than the clock")
    assert f"{GRACE} 600 → 1.67" in change.reason and "undone at the next start without --demo" in change.reason
    assert is_demo_change(DEMO_ACTOR, change.reason)


def test_a_demo_start_when_its_values_are_in_force_changes_nothing() -> None:
    assert demo_start(history((False, 600.0), (True, 1.67)), time_scale=360) is None


def test_a_second_demo_with_another_scale_scales_the_owners_value_not_the_first_demos() -> None:
    change = demo_start(history((False, 600.0), (True, 1.67)), time_scale=100)
    assert change is not None and change.assignments == (f"{GRACE}=6.0",)
    assert f"{GRACE} 600 → 6" in change.reason


def test_a_start_without_demo_takes_back_exactly_what_the_demo_replaced() -> None:
    steps = ((False, 600.0), (False, 120.0), (True, 0.333))  # an operator chose 120 s before the demo
    change = demo_end(history(*steps))
    assert change is not None and change.assignments == (f"{GRACE}=120.0",)
    assert change.reason.startswith("a start without --demo: the demo's values are taken back")
    assert not is_demo_change(DEMO_ACTOR, change.reason)  # the undo is not a demo change
    undone = history(*steps, (False, 120.0))
    assert demo_end(undone) is None and demo_state(undone).demo_in_force == {}


@pytest.mark.parametrize(
    ("steps", "left"),
    [
        (((False, 600.0),), "a policy the demo never touched"),
        (((False, 600.0), (True, 1.67), (False, 30.0)), "an operator changed the grace during the demo: theirs stays"),
        (((False, 600.0), (True, 1.67), (False, 600.0)), "someone already rolled the grace back"),
        ((), "no policy yet"),
    ],
)
def test_a_start_without_demo_leaves_alone(steps: tuple[tuple[bool, float], ...], left: str) -> None:
    assert demo_end(history(*steps)) is None, left


def test_an_operator_change_of_another_key_during_the_demo_does_not_hide_the_demos_grace() -> None:
    steps = history((False, 600.0), (True, 1.67))
    operator = PolicyVersion(3, False, {GRACE: 1.67})  # e.g. headroom changed; the demo's grace still in force
    change = demo_end([*steps, operator])
    assert change is not None and change.assignments == (f"{GRACE}=600.0",)


def test_values_are_read_from_a_real_document_and_the_assignments_apply_to_it() -> None:
    text = policy_seed_text(Policy(), "preset cardflow")
    document = validate_document(POLICY, text).model
    assert values_of(document) == {GRACE: 600.0, "idle_reclaim.window_s": 600.0, "idle_reclaim.grace_s": 300.0,
                                   "approvals.rules": [], "reviewers.by_project": {}}
    change = demo_start([PolicyVersion(1, False, values_of(document))], time_scale=1200)
    assert change is not None
    changed = validate_document(POLICY, set_values(text, list(change.assignments))).model
    assert changed.preemption.after_s == 0.5
    assert (changed.idle_reclaim.window_s, changed.idle_reclaim.grace_s) == (0.5, 0.25)
    assert [rule.name for rule in changed.approvals.rules] == [DEMO_APPROVAL_RULE["name"]]
    assert changed.approvals.rules[0].priority_class == "core" and changed.approvals.rules[0].gpu_hours_above == 20
    assert changed.reviewers.of("llm") == (DEMO_REVIEWER,) and changed.reviewers.of("vision") == ()
    assert "core work above 20 GPU-hours waits for a reviewer" in change.reason


def test_the_demo_adds_its_rule_and_reviewer_beside_the_owners_and_the_undo_gives_back_exactly_the_owners() -> None:
    text = set_values(policy_seed_text(Policy(), "preset cardflow"), [
        'approvals.rules=[{"name": "costly", "cost_above": 1000}]', 'reviewers.by_project={"llm": ["lena"], "vision": ["vic"]}'])
    owner = validate_document(POLICY, text).model
    start = demo_start([PolicyVersion(1, False, values_of(owner))], time_scale=100)
    assert start is not None
    demo_text = set_values(text, list(start.assignments))
    during = validate_document(POLICY, demo_text).model
    assert [rule.name for rule in during.approvals.rules] == ["costly", DEMO_APPROVAL_RULE["name"]]
    assert during.reviewers.of("llm") == ("lena", DEMO_REVIEWER) and during.reviewers.of("vision") == ("vic",)
    history = [PolicyVersion(1, False, values_of(owner)), PolicyVersion(2, True, values_of(during))]
    assert demo_start(history, time_scale=100) is None  # already in force
    end = demo_end(history)
    assert end is not None
    after = validate_document(POLICY, set_values(demo_text, list(end.assignments))).model
    assert values_of(after) == values_of(owner)
