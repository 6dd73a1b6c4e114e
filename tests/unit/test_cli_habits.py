"""The CLI's habits, pure parts: times as typed, elapsed columns, state names as the table prints
them, `--wait`'s exit codes and when a task is stuck, `--new`, the task filter's SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import typer

from services.cli.submit import (
    EXIT_NOT_ALL_SUCCEEDED,
    EXIT_STUCK,
    EXIT_TIMED_OUT,
    STORY_ORIGINAL_NEEDED,
    STORY_SENTENCE,
    derive_key,
    stuck_because,
    wait_outcome,
    with_key,
)
from services.cli.times import format_elapsed, parse_when
from services.cli.lang import CliLang
from services.cli.views import elapsed_seconds, parse_state, tasks_table
from services.console.views import TaskFilter

NOW = datetime(2026, 12, 1, 16, 30, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("2h", NOW - timedelta(hours=2)), ("30m", NOW - timedelta(minutes=30)), ("1.5d", NOW - timedelta(days=1.5)),
    ("1w", NOW - timedelta(weeks=1)), ("today", datetime(2026, 12, 1, tzinfo=UTC)),
    ("yesterday", datetime(2026, 11, 30, tzinfo=UTC)), ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),
    ("2026-11-30T08:00+08:00", datetime(2026, 11, 30, 0, 0, tzinfo=UTC)),
])  # fmt: skip
def test_times_as_typed(text: str, expected: datetime) -> None:
    assert parse_when(text, NOW) == expected


def test_a_time_that_is_not_one_says_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"'last tuesday' is not a time: give a duration ago \(30m, 2h"):
        parse_when("last tuesday", NOW)
    with pytest.raises(ValueError, match=r"'last tuesday' 不是时间：请给出多久以前"):
        parse_when("last tuesday", NOW, CliLang.ZH)


@pytest.mark.parametrize(("seconds", "shown"), [(None, ""), (0, "00:00:00"), (59.9, "00:00:59"), (3723, "01:02:03"),
                                                (93784, "1-02:03:04"), (-5, "00:00:00")])  # fmt: skip
def test_elapsed_like_slurm(seconds: float | None, shown: str) -> None:
    assert format_elapsed(seconds) == shown


def test_elapsed_counts_from_the_start_to_the_end_or_now() -> None:
    assert elapsed_seconds({"started_at": None}, NOW) is None
    assert elapsed_seconds({"started_at": "2026-12-01T16:00:00+00:00"}, NOW) == 1800
    assert elapsed_seconds({"started_at": "2026-12-01T15:00:00+00:00", "finished_at": "2026-12-01T15:10:00+00:00"}, NOW) == 600


@pytest.mark.parametrize(("typed", "value"), [
    ("unmatchable", "unmatchable"), ("no card fits", "unmatchable"), ("No-Card-Fits", "unmatchable"),
    ("无可用卡型", "unmatchable"), ("waiting for data", "waiting_data"), ("waiting_data", "waiting_data"),
    ("等待数据", "waiting_data"), ("RUNNING", "running"),
])  # fmt: skip
def test_state_accepts_what_the_table_prints(typed: str, value: str) -> None:
    assert parse_state(typed) == value


def test_an_unknown_state_lists_the_names() -> None:
    with pytest.raises(typer.BadParameter, match=r"unknown state 'stuck'; one of 'submitted', 'waiting for data' \(waiting_data\)"):
        parse_state("stuck")
    with pytest.raises(typer.BadParameter, match=r"未知状态 'stuck'；可选：'已提交' \(submitted\), '等待数据' \(waiting_data\)"):
        parse_state("stuck", CliLang.ZH)


def test_an_unreadable_since_of_alerts_and_an_until_without_zone_are_said_in_chinese() -> None:
    from typer.testing import CliRunner

    from services.cli.main import app

    alerts = CliRunner().invoke(app, ["alerts", "--since", "soon", "--lang", "zh"], env={"COLUMNS": "200"})
    assert alerts.exit_code == 2 and "应为 24h、7d、90m" in alerts.output, alerts.output
    replay = CliRunner().invoke(app, ["audit", "replay", "--until", "2026-12-01T08:00", "--lang", "zh"], env={"COLUMNS": "200"})
    assert replay.exit_code == 2 and "请给 --until 加上时区" in replay.output, replay.output


def test_the_tasks_table_has_class_gpus_submitted_and_elapsed() -> None:
    view = {"id": "T1", "name": "eval", "state": "unmatchable", "reason": "no_card_type", "reason_detail": "needs 200 GB",
            "project": "nlp", "priority_class": "core", "gpus": 8, "submitted_at": "2026-12-01T15:00:00+00:00",
            "started_at": "2026-12-01T15:30:00+00:00"}  # fmt: skip
    from rich.console import Console

    out = Console(width=250, record=True)
    out.print(tasks_table([view], CliLang.EN, NOW))
    text = out.export_text()
    for shown in ("Class", "GPUs", "Submitted (UTC)", "Elapsed", "core", "8", "2026-12-01 15:00", "01:00:00", "no card fits"):
        assert shown in text


@pytest.mark.parametrize(("view", "stuck"), [
    ({"state": "unmatchable", "reason_detail": "no card type has 200 GB"}, "no card type has 200 GB"),
    ({"state": "held", "reason": "quota_exhausted", "reason_detail": "quota of nlp used up"}, "quota of nlp used up"),
    ({"state": "held", "reason": "operator", "reason_detail": "held by user:ops: maintenance"}, "held by user:ops: maintenance"),
    ({"state": "held", "reason": "not_approved", "reason_detail": ""}, "not_approved"),
    ({"state": "held", "reason": "quota_not_yet_valid"}, None),  # its window starts by itself
    ({"state": "held", "reason": "no_capacity"}, None),
    ({"state": "queued", "reason": "queued"}, None),
    ({"state": "running"}, None),
])  # fmt: skip
def test_stuck_means_only_a_person_can_move_it(view: dict[str, str], stuck: str | None) -> None:
    assert stuck_because(view) == stuck


def test_a_stuck_task_in_chinese_names_its_reason_and_keeps_the_apis_sentence() -> None:
    view = {"state": "held", "reason": "quota_exhausted", "reason_detail": "quota of nlp used up"}
    assert stuck_because(view, CliLang.ZH) == "配额不足 (quota_exhausted)（原文：quota of nlp used up）"
    assert stuck_because({"state": "held", "reason": "not_approved"}, CliLang.ZH) == "等待审批 (not_approved)"


def test_a_stuck_task_in_chinese_is_told_by_its_storys_sentence_once_fetched() -> None:
    view = {"state": "held", "reason": "quota_exhausted", "reason_detail": "quota of nlp used up (40 of 40 GPU-h)",
            STORY_SENTENCE: "项目 nlp 的配额不足以支付此任务的预估用量（约 8 GPU 小时）", STORY_ORIGINAL_NEEDED: True}
    assert stuck_because(view, CliLang.ZH) == ("配额不足 (quota_exhausted)：项目 nlp 的配额不足以支付此任务的预估用量（约 8 GPU 小时）"
                                               "（原文：quota of nlp used up (40 of 40 GPU-h)）")
    exact = view | {STORY_ORIGINAL_NEEDED: False}
    assert stuck_because(exact, CliLang.ZH) == "配额不足 (quota_exhausted)：项目 nlp 的配额不足以支付此任务的预估用量（约 8 GPU 小时）"
    assert stuck_because(view) == "quota of nlp used up (40 of 40 GPU-h)"  # English: the API's sentence as it is


def test_wait_exit_codes() -> None:
    done, failed = {"state": "succeeded"}, {"state": "failed"}
    stuck, running = {"id": "T3", "state": "unmatchable"}, {"state": "running"}
    assert wait_outcome({0: done, 1: done}, 2, 1) == 0
    assert wait_outcome({0: done, 1: stuck}, 2, 1) == EXIT_STUCK
    assert wait_outcome({0: failed, 1: stuck}, 2, 1) == EXIT_NOT_ALL_SUCCEEDED
    assert wait_outcome({0: done, 1: running}, 2, 1) == EXIT_TIMED_OUT
    assert wait_outcome({0: done}, 2, 1) == EXIT_TIMED_OUT  # the second was never seen
    assert len({0, EXIT_STUCK, EXIT_NOT_ALL_SUCCEEDED, EXIT_TIMED_OUT, 3}) == 5  # 3: the token was refused


def test_new_derives_a_fresh_key_only_for_derived_keys() -> None:
    raw = {"name": "a", "gpus": 1}
    assert with_key(raw)["idempotency_key"] == derive_key(raw)
    assert with_key(raw, "1")["idempotency_key"] != with_key(raw, "2")["idempotency_key"] != derive_key(raw)
    assert with_key({**raw, "idempotency_key": "mine"}, "1")["idempotency_key"] == "mine"


def test_task_filter_sql() -> None:
    assert TaskFilter().where() == ("true", [])
    since = datetime(2026, 11, 30, tzinfo=UTC)
    condition, args = TaskFilter(project="nlp", priority_class="core", name="eval_*%", submitted_since=since).where()
    assert condition == ("project = $1 AND view->>'priority_class' = $2 AND name LIKE $3"
                         " AND (view->>'submitted_at')::timestamptz >= $4")  # fmt: skip
    assert args == ["nlp", "core", "eval\\_%\\%", since]


def test_the_ledger_and_quota_tables_speak_chinese_with_lang_zh() -> None:
    from rich.console import Console

    from services.cli.ledger import _ledger_table, _quota_table

    ledger_row = {"project": "llm", "gpu_hours": 12.5, "cost": 40.0, "currency": "CNY", "output_units": 1000,
                  "output_unit": "samples", "cost_per_output_unit": 0.04}  # fmt: skip
    quota_row = {"account_id": "llm-q4", "project": "llm", "card_type": None, "gpu_hours": 100.0, "used_gpu_hours": 12.5,
                 "remaining_gpu_hours": 87.5, "used_share": 0.125, "valid_from": "2026-10-01T00:00:00+00:00",
                 "valid_to": "2026-12-31T00:00:00+00:00", "days_left": -1, "changed_by": "user:ops", "alerts_raised": []}  # fmt: skip
    shown = {}
    for lang in (CliLang.EN, CliLang.ZH):
        out = Console(width=250, record=True)
        out.print(_ledger_table([ledger_row], "project", "", lang))
        out.print(_quota_table([quota_row], lang))
        shown[lang] = out.export_text()

    for zh in ("cardflow 账本", "项目", "GPU 小时（真实）", "费用 (CNY)", "产出量", "CNY / 单位", "配额账户", "剩余天数", "任意", "已过期", "真实（挂钟）小时"):
        assert zh in shown[CliLang.ZH] and zh not in shown[CliLang.EN]
    for en in ("GPU-hours (real)", "cost (CNY)", "quota accounts", "days left", "expired", "any"):
        assert en in shown[CliLang.EN]
    assert "12.500" in shown[CliLang.ZH] and "llm-q4" in shown[CliLang.ZH]
