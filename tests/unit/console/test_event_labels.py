"""Every event type has a Chinese name; a history line's sentence in Chinese comes from its stored fields (pure)."""

from __future__ import annotations

import re

import pytest

from services.console.labels_events import EVENT_LABELS_ZH, EVENT_TYPE_LABELS_ZH, event_type_label
from services.console.sentences import history_sentence, sentence_fields
from shared.events import EVENT_CLASSES, EVENT_TYPES
from shared.projection import evolve
from tests.helpers.task_events import TaskStory

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("event_class", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_type_the_system_defines_has_a_chinese_name(event_class: type) -> None:
    assert CJK.search(EVENT_LABELS_ZH[event_class])


def test_the_names_by_type_string_cover_the_catalog_and_nothing_else() -> None:
    assert set(EVENT_TYPE_LABELS_ZH) == set(EVENT_TYPES)
    assert len(set(EVENT_LABELS_ZH.values())) == len(EVENT_LABELS_ZH)  # no two types read alike


def test_english_shows_the_type_itself_and_chinese_its_name() -> None:
    assert event_type_label("lease.granted") == "lease.granted"
    assert event_type_label("lease.granted", "zh") == "已分配 GPU（租约）"
    assert event_type_label("task.from_the_future", "zh") == "task.from_the_future"  # unknown: the type, never nothing


def test_a_history_line_in_chinese_is_rendered_from_the_fields_stored_with_it() -> None:
    story = TaskStory("T1")
    view = evolve(evolve(None, story.submitted()), story.readiness(ready=False))
    assert view is not None
    sentence, original = history_sentence(view.reason, view.reason_detail, sentence_fields(view), "zh")
    assert sentence is not None and sentence.startswith("等待 ") and not original  # the Chinese says it all
    assert history_sentence(view.reason, view.reason_detail, sentence_fields(view), "en") == (view.reason_detail, False)


def test_a_line_stored_without_fields_keeps_its_english_detail_marked_as_original() -> None:
    assert history_sentence("no_capacity", "no free H100 GPUs: 8 needed", None, "zh") == (None, True)
    assert history_sentence("a_reason_from_the_future", "something new", {"gpus": "8"}, "zh") == (None, True)


def test_fields_a_template_gained_later_read_as_unknown_on_old_lines() -> None:
    sentence, original = history_sentence("no_capacity", "no free H100 GPUs", {"card_type": "H100"}, "zh")
    assert sentence == "当前没有足够的空闲 H100 GPU（需要 ? 张），等待正在运行的任务释放" and original


def test_a_queued_line_names_the_priority_class_in_chinese() -> None:
    story = TaskStory("T1")
    view = evolve(evolve(evolve(None, story.submitted()), story.readiness(ready=True)), story.queued())
    assert view is not None
    assert history_sentence(view.reason, view.reason_detail, sentence_fields(view), "zh") == ("在 GPU 队列中等待（标准，优先级 5）", False)
