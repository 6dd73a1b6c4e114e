"""The board snapshot's CSV and HTML (pure rendering) and the plots' time windows."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from services.console.blockers import group_board
from services.console.boards import board_json
from services.console.pages.templating import render_snapshot_html
from services.console.series import BUCKETS, window
from services.console.snapshots import CSV_COLUMNS, board_csv, day_prefix, next_run
from shared.projection import evolve
from tests.helpers.task_events import T0, TaskStory


def a_board():
    story, other = TaskStory("T-data"), TaskStory("T-quota")
    views = []
    for s, steps in ((story, [story.submitted(), story.readiness(False, ("s3://lake/a.parquet",))]),
                     (other, [other.submitted(), other.readiness(True), other.matched(), other.held("quota_exhausted")])):  # fmt: skip
        view = None
        for event in steps:
            view = evolve(view, event)
        views.append(view)
    return group_board(views, {"T-data": T0 - timedelta(hours=2)})


def test_csv_has_one_row_per_open_task_with_its_group_reason_and_inputs() -> None:
    rows = list(csv.DictReader(io.StringIO(board_csv(a_board(), T0))))
    assert list(rows[0]) == list(CSV_COLUMNS)
    by_task = {row["task_id"]: row for row in rows}
    assert (by_task["T-data"]["blocker"], by_task["T-data"]["missing_inputs"]) == ("data", "s3://lake/a.parquet")
    assert by_task["T-data"]["waiting_since"] == (T0 - timedelta(hours=2)).isoformat()
    assert (by_task["T-quota"]["blocker"], by_task["T-quota"]["reason"]) == ("quota", "quota_exhausted")


def test_html_snapshot_is_self_contained_in_either_language() -> None:
    board = a_board()
    english = render_snapshot_html(board_json(board, "en"), "en", T0)
    chinese = render_snapshot_html(board_json(board, "zh"), "zh", T0)
    assert "waiting for data" in english and "s3://lake/a.parquet" in english
    assert 'lang="zh-CN"' in chinese and "等待数据" in chinese and "项目 proj-a 的配额不足" in chinese
    for page in (english, chinese):
        assert "<script" not in page and "http://" not in page and "<link" not in page


def test_snapshot_keys_are_per_utc_day_and_the_loop_runs_after_midnight() -> None:
    late = datetime(2026, 12, 1, 23, 59, tzinfo=UTC)
    assert day_prefix(late) == "board/2026-12-01/"
    assert next_run(late) == datetime(2026, 12, 2, 0, 5, tzinfo=UTC)


def test_plot_windows_start_at_the_first_fact_and_split_in_buckets() -> None:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    start, end, bucket = window(now - timedelta(minutes=48), now, timedelta(hours=24))
    assert (start, end, bucket) == (now - timedelta(minutes=48), now, timedelta(minutes=1))
    start, _, bucket = window(None, now, timedelta(hours=24))
    assert start == now - timedelta(hours=24) and bucket * BUCKETS == timedelta(hours=24)
