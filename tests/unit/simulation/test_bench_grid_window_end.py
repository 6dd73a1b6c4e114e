"""bench/grid_window_end.py: work after the window's end, per tenth of the window, one span for both arms."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import grid_window_end as edge  # noqa: E402


def test_work_after_the_end_is_split_by_when_its_lease_started():
    segments = [(0.0, 10.0, 2),  # ends inside
                (8.0, 14.0, 4),  # running at the end (10): 4 GPUs x 4 s after it
                (12.0, 15.0, 1)]  # started later: all of it
    assert edge.split_at(segments, 10.0) == (16.0, 3.0)


def test_a_stretch_is_shared_between_the_tenths_it_crosses():
    sums = edge.by_tenth([(5.0, 25.0, 2.0)], 0.0, 100.0)  # tenths of 10 s
    assert sums[:3] == [10.0, 20.0, 10.0] and sum(sums) == 40.0


def _unit(useful_by_tenth, whole, last_finish, capacity=1000.0, gpus=10):
    return {"useful by tenth": useful_by_tenth, "nothing ready by tenth": [0.0] * edge.TENTHS, "whole run": whole,
            "last finish": last_finish, "lo": 0.0, "capacity": capacity, "gpus": gpus}


def test_the_backlog_is_the_useful_difference_so_far():
    ours = _unit([100.0] * 9 + [50.0], 1000.0, 200.0)
    easy = _unit([100.0] * 10, 1000.0, 150.0)
    rows = edge.tenths_rows([(ours, easy)])
    assert rows[0] == "| 1 | +0.00 | +0.00 | +0.00 |"
    assert rows[-1] == "| 10 | -50.00 | +0.00 | +5.00 |"  # 50 of the tenth's 100; 50 of the window's 1000


@pytest.mark.parametrize(("ours_whole", "expected"), [(1000.0, 0.0), (980.0, -1.0)])
def test_the_fair_difference_takes_one_span_for_both(ours_whole, expected):
    ours = _unit([0.0] * edge.TENTHS, ours_whole, 200.0)  # 10 GPUs x 200 s = 2000 GPU-s, the later finish
    easy = _unit([0.0] * edge.TENTHS, 1000.0, 150.0)
    assert edge.fair_points([(ours, easy)]) == pytest.approx(expected)


def test_work_after_the_end_is_grouped_by_class_and_preemption():
    simulation = edge.TaggedSimulation.__new__(edge.TaggedSimulation)
    simulation.tagged = [("a", "opportunistic", (0.0, 5.0, 2)), ("a", "opportunistic", (8.0, 20.0, 2)),
                         ("b", "core", (9.0, 12.0, 1))]
    assert simulation.after_end_by_group(10.0) == {"opportunistic, preempted": 20.0, "core, one lease": 2.0}


def test_a_tasks_work_after_the_end_is_kept_with_its_leases():
    simulation = edge.TaggedSimulation.__new__(edge.TaggedSimulation)
    simulation.tagged = [("a", "opportunistic", (0.0, 3600.0, 2)), ("a", "opportunistic", (7200.0, 14400.0, 2)),
                         ("b", "core", (0.0, 1800.0, 1))]  # b: one lease, done before the end: not kept
    kept = simulation.tasks_after_end(10800.0)
    assert kept == {"a": ["opportunistic", 2, 7200.0, 2, -1.0, 2 * 3600.0 + 2 * 7200.0]}
