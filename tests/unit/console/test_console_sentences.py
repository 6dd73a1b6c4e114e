"""Reason sentences in Chinese: one template per machine reason, filled from the view (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.console.labels import REASON_LABELS_ZH
from services.console.pages.templating import duration_text, labels_for
from services.console.quota_banner import banner_alerts, quota_alerts
from shared.alerts import AlertKind
from services.console.sentences import (
    ZH_TEMPLATES,
    history_facts,
    reason_sentence,
    sentence_fields,
    sentence_from_fields,
    template_fields,
)
from shared.events.reasons import RequeueReason, UnmatchableReason
from shared.projection import evolve
from shared.task_view import TaskView, ViewReason
from shared.scheduling.model import DeferralReason
from tests.helpers.task_events import TaskStory

ALL_REASONS = [*ViewReason, *DeferralReason, *UnmatchableReason, *RequeueReason]


def view_after(*steps: str, **kwargs: object) -> TaskView:
    story = TaskStory("T1")
    view = None
    for step in steps:
        view = evolve(view, getattr(story, step)(**kwargs.get(step, {})))  # type: ignore[arg-type]
    assert view is not None
    return view


@pytest.mark.parametrize("reason", ALL_REASONS, ids=str)
def test_every_reason_has_a_chinese_template_and_name(reason: str) -> None:
    assert reason.value in ZH_TEMPLATES
    assert reason.value in REASON_LABELS_ZH or reason.value in {"succeeded", "failed", "cancelled", "rejected"}


def test_templates_use_only_fields_the_view_provides() -> None:
    provided = set(sentence_fields(TaskView(id="T")))
    for reason, template in ZH_TEMPLATES.items():
        assert template_fields(template) <= provided, reason


@pytest.mark.parametrize("reason", sorted(ZH_TEMPLATES), ids=str)
def test_a_history_line_stores_only_its_templates_fields_and_renders_the_same_sentence(reason: str) -> None:
    rich = view_after("submitted", "readiness", "matched", "granted", "started", "succeeded", readiness={"ready": False},
                      granted={"node": "h100-a", "card": "H100", "gpus": (0, 1)}, started={"node": "h100-a"})  # fmt: skip
    view = rich.model_copy(update={"reason": reason, "cancel_reason": "by hand", "last_checkpoint": "s3://ckpt/T1/0.5",
                                   "flags": ("output_out_of_bounds",)})  # fmt: skip
    stored = history_facts(view)
    assert set(stored) == template_fields(ZH_TEMPLATES[reason])
    assert sentence_from_fields(reason, stored) == sentence_from_fields(reason, sentence_fields(view))


def test_a_reason_without_a_template_stores_no_fields() -> None:
    assert history_facts(view_after("submitted").model_copy(update={"reason": "added_later"})) == {}


def test_waiting_for_data_names_each_input_and_the_share_ready() -> None:
    view = view_after("submitted", "readiness",
                      readiness={"ready": False, "missing": ("s3://lake/a.parquet", {"dataset": "tokens", "version": "3"}), "fraction": 1 / 3})  # fmt: skip
    assert reason_sentence(view, "zh") == "等待 2 个输入（已就绪 33%）：s3://lake/a.parquet, tokens@3"
    assert reason_sentence(view, "en") == view.reason_detail


def test_running_and_capacity_sentences_use_the_lease_and_the_request() -> None:
    running = view_after("submitted", "readiness", "matched", "granted", "started", readiness={"ready": True},
                         granted={"node": "h100-a", "card": "H100", "gpus": (0, 1)}, started={"node": "h100-a"})  # fmt: skip
    assert reason_sentence(running, "zh") == "正在节点 h100-a 上运行（H100，GPU 0,1）"
    full = view_after("submitted", "readiness", "matched", "held", readiness={"ready": True},
                      held={"reason": "no_capacity", "detail": "no node has 2 free A100"})  # fmt: skip
    assert reason_sentence(full, "zh").startswith("当前没有足够的空闲 A100 GPU")


@pytest.mark.parametrize("steps", [("granted", "started", "succeeded"), ("granted", "succeeded")], ids=["started", "carried"])
def test_a_success_names_the_node_it_ran_on_whether_its_start_was_told_or_carried(steps: tuple[str, ...]) -> None:
    carried = "started" not in steps
    view = view_after("submitted", "readiness", "matched", *steps, readiness={"ready": True}, granted={"node": "h100-a"},
                      started={"node": "h100-a"}, succeeded={"output_units": 5.0, **({"started_on": "h100-a"} if carried else {})})  # fmt: skip
    assert reason_sentence(view, "zh") == "已在节点 h100-a 上成功完成，产出 5 单位"
    assert ("started on node h100-a" in reason_sentence(view, "en")) is carried


def test_a_reason_added_later_falls_back_to_the_english_sentence() -> None:
    view = TaskView(id="T", reason="brand_new_reason", reason_detail="something new happened")
    assert reason_sentence(view, "zh") == "something new happened"


@pytest.mark.parametrize(("seconds", "lang", "text"), [
    (45, "en", "45 s"), (3 * 3600 + 20 * 60 + 5, "en", "3 h 20 min"), (2 * 86400 + 3600, "zh", "2 天 1 小时"),
    (0, "zh", "0 秒"), (None, "en", "—"),
])  # fmt: skip
def test_durations_read_in_both_languages(seconds: float | None, lang: str, text: str) -> None:
    assert duration_text(seconds, lang) == text


def test_quota_alerts_for_accounts_expiring_within_their_lead_or_used_up() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)

    def account(name: str, days: float, used: float, raised: list[str], lead: float = 15.0) -> dict:
        return {"account_id": name, "project": "p", "card_type": None, "gpu_hours": 100.0, "used_gpu_hours": used,
                "remaining_gpu_hours": 100.0 - used, "used_share": used / 100, "alert_lead_days": lead,
                "valid_from": (now - timedelta(days=30)).isoformat(), "valid_to": (now + timedelta(days=days)).isoformat(),
                "alerts_raised": raised}  # fmt: skip

    rows = [account("soon", 10, 5, []), account("later", 40, 5, []), account("low", 40, 96, ["80%", "95%"]),
            account("gone", -1, 5, []), account("short-lead", 10, 5, [], lead=3.0), account("empty", 50, 100, [])]
    alerts = quota_alerts(rows, now)
    assert [(a["account_id"], a["kind"]) for a in alerts] == [("soon", "expiring"), ("low", "low"), ("empty", "low")]
    assert alerts[0]["days_left"] == 10.0


def test_the_banner_says_each_fact_once() -> None:
    expiring = {"kind": "expiring", "account_id": "vision-q4", "project": "vision", "days_left": 2.0}
    held = {"kind": "quota_hold", "task_id": "T1", "account_id": None, "sentence": "task T1 is held (quota_expires)"}
    recent = [  # newest first, as load_alerts returns them
        held,
        {"kind": "quota_expiring", "task_id": None, "account_id": "vision-q4", "sentence": "quota account vision-q4 expires"},
        {**held, "alert_id": "older"},
        {"kind": "quota_hold", "task_id": "T2", "account_id": None, "sentence": "task T2 is held (quota_exhausted)"},
        {"kind": "quota_threshold", "task_id": None, "account_id": "speech-q4", "sentence": "speech-q4 has used 80%"},
    ]
    shown = banner_alerts([expiring], recent, task_names={"T1": "finetune-7b"})
    assert shown[0] == expiring  # the account's own line, with its live countdown
    assert [(a["kind"], a.get("task_id") or a["account_id"], a["repeats"]) for a in shown[1:]] == [
        ("quota_hold", "T1", 2), ("quota_hold", "T2", 1), ("quota_threshold", "speech-q4", 1)]  # fmt: skip
    assert [a["task_name"] for a in shown[1:]] == ["finetune-7b", "T2", None]  # a name not known: the id


def test_every_alert_kind_has_a_tag_in_both_languages() -> None:
    for lang in ("en", "zh"):
        labels = labels_for(lang)["L"]
        assert all(f"alert_kind_{kind.value}" in labels for kind in AlertKind), lang
