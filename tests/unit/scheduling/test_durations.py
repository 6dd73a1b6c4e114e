"""`reasons.format_duration`: the short durations deferral sentences say, remembered per whole minute."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.scheduling.reasons import format_duration


def said(seconds: float) -> str:
    """What `format_duration` says, worked out from scratch: seconds under a minute (nothing below 0s), then whole
    minutes, hours and minutes under two days, then days and hours."""
    seconds = seconds if seconds > 0.0 else 0.0
    if seconds < 60:
        return f"{seconds:.0f}s"
    hours, minutes = divmod(int(seconds // 60), 60)
    if not hours:
        return f"{minutes}m"
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


@pytest.mark.parametrize("seconds, text", [(-5.0, "0s"), (float("nan"), "0s"), (-0.0, "0s"), (0.4, "0s"), (59.4, "59s"),
                                           (59.99, "60s"), (60.0, "1m"), (3599.0, "59m"), (3600.0, "1h00m"),
                                           (172_799.0, "47h59m"), (172_800.0, "2d00h"), (6e6 * 60, "4166d16h")])
def test_a_duration_is_said_in_its_largest_units(seconds, text) -> None:
    assert format_duration(seconds) == text
    assert format_duration(seconds) == text  # said again, from memory where it was remembered


@given(st.floats(-1e3, 1e10, allow_nan=False) | st.sampled_from((float("nan"), 59.999999, 60.0, 6e6)))
def test_a_remembered_duration_is_said_as_when_first_worked_out(seconds) -> None:
    assert format_duration(seconds) == said(seconds)
    assert format_duration(seconds) == said(seconds)


def test_every_minute_is_said_alike_from_memory() -> None:
    """Said once for each of 5,000 minutes (remembered), then again: each from memory is what it first was."""
    first = [format_duration(minutes * 60.0 + 30.0) for minutes in range(1, 5_001)]
    assert first == [said(minutes * 60.0 + 30.0) for minutes in range(1, 5_001)]
    assert [format_duration(minutes * 60.0 + 1.0) for minutes in range(1, 5_001)] == first
