"""The console's plots: the time axis in digits only, so it reads the same on the Chinese page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from services.console.pages.charts import line_chart

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@pytest.mark.parametrize(("step", "points", "expected"), [
    (timedelta(minutes=1), 60, "2026-11-03"),  # the offset: the day
    (timedelta(hours=1), 48, "11-04"),  # a new day among hour ticks
    (timedelta(days=1), 40, "2026-12"),  # a new month among day ticks
])  # fmt: skip
def test_time_axis_labels_name_no_month_in_english(step: timedelta, points: int, expected: str) -> None:
    times = [datetime(2026, 11, 3, 6, 0, tzinfo=UTC) + step * i for i in range(points)]
    svg = line_chart(times, {"H100": [i % 5 for i in range(points)]}, y_label="tasks")
    labels = re.findall(r">([^<]{1,24})</text>", svg)
    assert expected in labels, labels
    assert not [label for label in labels if any(month in label for month in MONTHS)], labels
