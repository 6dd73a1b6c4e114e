"""The demo workload: valid where it should be, impossible and invalid where it should be, timed."""

from __future__ import annotations

import pytest

from services.demo.workload import (
    DEMO_FLEET,
    DEMO_TEMPLATES,
    DataActionKind,
    build_workload,
    demo_time_scale,
    estimated_busy_s,
    wire_form,
)
from shared.cards import load_catalog
from shared.config import FoundTemplate, template_document, validate_document
from shared.config.submission_templates import resolve_submission
from shared.cards.matching import MatchRequest, rank_cards
from shared.submission import SubmissionInvalid, parse_s3_uri, validate_submission

CATALOG = load_catalog()
FLEET_CARDS = {agent.card_type for agent in DEMO_FLEET}


def chosen_card(submission: dict) -> str | None:
    request = MatchRequest(gpus=submission["gpus"], min_vram_gb=submission.get("min_vram_gb") or 0,
                           estimate_gpu_hours=submission["estimate_gpu_hours"], profile=submission["profile"])  # fmt: skip
    match = rank_cards(request, CATALOG, available_types=FLEET_CARDS)
    return match.chosen.card_type if match.chosen else None


def test_every_submission_but_the_invalid_one_validates() -> None:
    workload = build_workload("r1")

    for submission in workload.submissions:  # a templated one as intake stores it: pinned to the version
        validate_submission({**submission, "template": f"{submission['template']}@1"} if "template" in submission else submission)
    for submission in workload.invalid:
        with pytest.raises(SubmissionInvalid) as caught:
            validate_submission(submission)
        assert len(caught.value.problems) >= 3


def test_the_workload_mixes_classes_and_projects_and_keys_are_unique_per_run() -> None:
    workload = build_workload("r1")

    assert {s["priority_class"] for s in workload.submissions} == {"core", "standard", "opportunistic"}
    assert len({s["project"] for s in workload.submissions}) >= 3
    assert len(workload.keys) == len(workload.submissions)
    assert not workload.keys & build_workload("r2").keys


def test_small_jobs_go_to_the_cheaper_card_and_big_ones_to_h100_and_one_fits_nowhere() -> None:
    workload = build_workload("r1")
    cards = {s["idempotency_key"]: chosen_card(s) for s in workload.submissions}

    assert cards.pop(workload.impossible_key) is None
    assert set(cards.values()) == {"H100", "L40S"}
    for submission in workload.submissions:
        if submission.get("min_vram_gb", 0) <= 48 and submission["idempotency_key"] != workload.impossible_key:
            assert cards[submission["idempotency_key"]] == "L40S", submission["name"]


def test_each_delayed_data_action_makes_one_waiting_task_ready() -> None:
    workload = build_workload("r1")
    inputs = [i for s in workload.submissions for i in s.get("inputs", ())]
    made_ready = set()
    for action in workload.data_actions:
        if action.kind is DataActionKind.PUT_OBJECT:
            location = parse_s3_uri(action.target)
            made_ready.add(action.target.removesuffix("_READY") if location.key.endswith("_READY") else action.target)
        else:
            made_ready.add(action.target)

    named = {i if isinstance(i, str) else f"{i['dataset']}@{i['version']}" for i in inputs}
    assert named == made_ready
    assert all(action.after_s > 0 for action in workload.data_actions)


def test_the_time_scale_fits_the_busiest_card_type_into_the_target() -> None:
    workload = build_workload("r1")
    scale = demo_time_scale(workload.submissions, DEMO_FLEET, CATALOG, target_s=30)
    busy = estimated_busy_s(workload.submissions, DEMO_FLEET, CATALOG)

    assert max(busy.values()) / scale == pytest.approx(30, rel=0.01)
    assert set(busy) == FLEET_CARDS


def test_templated_jobs_are_sent_without_the_template_defaults_and_resolve_to_the_whole_submission() -> None:
    documents = {t.name: validate_document(template_document(t.name), t.text()).model for t in DEMO_TEMPLATES}
    lookup = lambda call: FoundTemplate(call.name, 1, documents[call.name])  # noqa: E731
    templated = [s for s in build_workload("r1").submissions if "template" in s]

    assert {s["template"] for s in templated} == set(documents) and len(templated) >= 4
    for submission in templated:
        sent = wire_form(submission)
        assert "project" not in sent and "profile" not in sent and sent["template"] == submission["template"]
        resolved, problems = resolve_submission(sent, lookup)
        assert problems == []
        assert validate_submission(resolved) == validate_submission({**submission, "template": f"{submission['template']}@1"})
    untemplated = next(s for s in build_workload("r1").submissions if "template" not in s)
    assert wire_form(untemplated) == untemplated


def test_the_demos_approval_rule_holds_exactly_the_tasks_its_reviewer_decides_and_one_task_idles() -> None:
    """The rule the demo's policy adds (`DEMO_APPROVAL_RULE`), applied by the dispatcher's own pure
    `approval_needed` to each task's matched card, holds exactly the tasks `DEMO_REVIEWS` decides."""
    from shared.config.demo_policy import DEMO_APPROVAL_RULE
    from shared.config.governance import ApprovalRule
    from shared.leasing.approvals import approval_needed
    from shared.scheduling.model import CardOption, PriorityClass, QueuedTask

    from services.demo.workload import DEMO_REVIEWS

    rule = ApprovalRule(**DEMO_APPROVAL_RULE)
    workload = build_workload("r1")
    held = set()
    for s in workload.submissions:
        request = MatchRequest(gpus=s["gpus"], min_vram_gb=s.get("min_vram_gb") or 0,
                               estimate_gpu_hours=s["estimate_gpu_hours"], profile=s["profile"])  # fmt: skip
        chosen = rank_cards(request, CATALOG, available_types=FLEET_CARDS).chosen
        if chosen is None:
            continue
        task = QueuedTask(s["name"], s["project"], PriorityClass(s["priority_class"]), 0, s["gpus"], 0.0,
                          (CardOption(chosen.card_type, chosen.runtime_s, chosen.cost),))  # fmt: skip
        if approval_needed(task, [rule]):
            held.add(s["name"])
    assert held == {review.name for review in DEMO_REVIEWS} == {"finetune-7b", "finetune-13b-rush"}
    assert {review.decision.value for review in DEMO_REVIEWS} == {"approve", "deny"}
    assert all(review.reason for review in DEMO_REVIEWS)
    assert [s["name"] for s in workload.submissions if s.get("labels", {}).get("sim_util_pct") == "0"] == ["stuck-dataloader"]
    assert {s["name"] for s in workload.submissions} - {s["name"] for s in workload.to_run} == {"finetune-13b-rush",
                                                                                                "stuck-dataloader"}
