"""The audit trail in Chinese: every step the story tells has a Chinese teller, rendered from the
event's fields; the English sentence is kept as 原文 only where the event carries English words (pure)."""

from __future__ import annotations

import re

import pytest

from services.audit.reading import ArchivedEvent
from services.audit.story import _TELL, Story, tell
from services.console.audit_sentences import LEASE_END_ZH, TELL_ZH, reason_name_zh, step_told_in
from services.console.labels import PROFILE_LABELS, profile_label
from shared.events import EVENT_TYPES
from shared.events.reasons import ReleaseReason, RevokeReason
from shared.scheduling.model import Profile
from tests.helpers.task_events import TaskStory

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_event_type_the_story_tells_has_a_chinese_teller() -> None:
    assert {EVENT_TYPES[event_type] for event_type in _TELL} == set(TELL_ZH)


@pytest.mark.parametrize("reason", [*RevokeReason, *ReleaseReason], ids=str)
def test_every_way_a_lease_ends_has_a_chinese_name(reason: str) -> None:
    assert CJK.search(LEASE_END_ZH[reason]) and CJK.search(str(reason_name_zh(reason.value)))


def a_told_story() -> Story:
    task = TaskStory("T1")
    events = [task.submitted(), task.readiness(ready=False), task.readiness(ready=True), task.matched(), task.queued(),
              task.held("quota_exhausted", "quota of proj-a covers 1 of 4 GPU-hours"), task.granted(), task.started(),
              task.checkpointed(), task.requeued("preempted"), task.granted(), task.failed("CUDA out of memory")]  # fmt: skip
    return tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])


def test_each_step_in_chinese_and_the_english_only_where_the_event_carries_english_words() -> None:
    story = a_told_story()
    told = {step.event_id: (step, step_told_in(step, "zh")) for step in story.steps}
    assert all(CJK.search(said["sentence"]) and CJK.search(said["event_label"]) for _, said in told.values())
    by_type = {step.type: said for step, said in told.values()}
    assert by_type["task.held"]["sentence"] == "暂缓：配额不足（quota_exhausted）"
    assert by_type["task.held"]["original"] == "deferred (quota_exhausted): quota of proj-a covers 1 of 4 GPU-hours"
    assert by_type["lease.granted"]["sentence"].startswith("第 2 次运行：已分配节点 n1（A100）的 GPU 0,1")
    assert by_type["task.failed"]["sentence"] == "运行失败（退出码 1）" and "CUDA out of memory" in by_type["task.failed"]["original"]
    for event_type in ("task.submitted", "task.readiness_changed", "task.queued", "lease.granted", "task.started", "task.checkpointed"):
        assert by_type[event_type]["original"] is None, event_type  # everything they say comes from fields
    assert by_type["task.requeued"]["reason_label"] == "被抢占，重新排队"


def test_a_match_step_takes_the_matchers_chinese_choice_and_keeps_the_english_without_it() -> None:
    (matched,) = [step for step in a_told_story().steps if step.type == "task.matched"]
    alone = step_told_in(matched, "zh")
    assert alone["sentence"].startswith("匹配到 A100：预计 1.00 小时，成本 12.50；备选：H100-X")
    assert alone["original"] == matched.sentence  # the choice's words: only the English ones
    why = "A100 是满足要求的最便宜卡型：12.50 USD，2 张 GPU 上约 1.00 小时"
    with_why = step_told_in(matched, "zh", why)
    assert with_why["sentence"].endswith("——" + why) and with_why["original"] is None


def test_a_filler_grant_says_in_both_languages_that_it_yields_the_headroom_to_core_work_at_once() -> None:
    task = TaskStory("T1")
    events = [task.submitted(), task.granted(), task.requeued("preempted"), task.granted(borrowed_headroom=True)]
    story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
    plain, filler = [step for step in story.steps if step.type == "lease.granted"]
    assert "filler" not in plain.sentence and filler.sentence.endswith(
        ", as a filler of the burst headroom (yields it to core work at once)")
    assert "填充" not in step_told_in(plain, "zh")["sentence"]
    assert step_told_in(filler, "zh")["sentence"].endswith("，作为突发余量的填充任务（核心任务到来时立即让出）")


def test_english_steps_are_told_as_before() -> None:
    for step in a_told_story().steps:
        assert step_told_in(step, "en") == {"event_label": step.type, "reason_label": step.reason,
                                            "sentence": step.sentence, "original": None}  # fmt: skip


@pytest.mark.parametrize("profile", list(Profile))
def test_every_workload_profile_has_a_name_in_each_language(profile: Profile) -> None:
    assert profile_label(profile, "en") == profile.value
    assert CJK.search(profile_label(profile, "zh")), profile


def test_a_submission_step_names_its_profile_and_class_in_chinese() -> None:
    story = a_told_story()
    (submitted,) = [step for step in story.steps if step.type == "task.submitted"]
    sentence = step_told_in(submitted, "zh")["sentence"]
    profile = submitted.event.data.submission.profile
    assert f"负载类型 {PROFILE_LABELS['zh'][profile.value]}" in sentence and profile.value not in sentence


def test_a_failure_that_carries_its_start_is_told_in_chinese_with_the_start_first() -> None:
    def in_chinese(events: list) -> list[tuple[str, str]]:
        story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
        return [(step.type, step_told_in(step, "zh")["sentence"]) for step in story.steps]

    alone, carried = TaskStory("T1"), TaskStory("T1")
    separate = in_chinese([alone.submitted(), alone.granted(), alone.started(), alone.failed("boom", 3)])
    assert in_chinese([carried.submitted(), carried.granted(), carried.failed("boom", 3, started_on="n1")]) == separate
    assert ("task.started", "在节点 n1 上开始运行") in separate


def test_a_transition_carried_by_the_next_event_is_told_in_chinese_as_its_own_event_would_be() -> None:
    def in_chinese(events: list) -> list[tuple[str, str]]:
        story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
        return [(step.type, step_told_in(step, "zh")["sentence"]) for step in story.steps]

    alone, carried = TaskStory("T1"), TaskStory("T1")
    separate = in_chinese([alone.submitted(), alone.queued(), alone.granted(), alone.started(), alone.succeeded()])
    assert in_chinese([carried.submitted(), carried.granted(queued=True), carried.succeeded(started_on="n1")]) == separate
    assert [said for kind, said in separate if kind in ("task.queued", "task.started")] == [
        "进入 GPU 队列（标准，优先级 5）", "在节点 n1 上开始运行"]
