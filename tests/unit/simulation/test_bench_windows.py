"""The all-windows part of the policy benchmark: window starts and the pooled verdict (hand-computed)."""

from __future__ import annotations

from datetime import date

import pytest
from tests.helpers.bench_scripts import load_bench_script

windows = load_bench_script("policies_windows")


def result(start: date, capacity_gpu_h: float, ours: float, theirs: float, our_waits, their_waits):
    return windows.WindowResult(start, jobs=10, gpus=8, offered_load=1.0, capacity_gpu_h=capacity_gpu_h,
                                utilisation={"cardflow": ours, "easy-backfill": theirs},
                                core_waits_s={"cardflow": list(our_waits), "easy-backfill": list(their_waits)})


def test_windows_start_every_few_days_until_the_end():
    assert windows.window_starts(date(2017, 9, 25), date(2017, 10, 4), 4) == [
        date(2017, 9, 25), date(2017, 9, 29), date(2017, 10, 3)]


def test_pooled_utilisation_is_weighted_by_capacity_and_waits_are_pooled():
    results = [result(date(2017, 1, 1), 100.0, 0.90, 0.80, [60.0] * 19 + [6000.0], [120.0] * 20),
               result(date(2017, 1, 5), 300.0, 0.50, 0.60, [60.0] * 20, [120.0] * 20)]
    pooled = windows.pooled(results)
    # (0.9 x 100 + 0.5 x 300) / 400 = 0.6; (0.8 x 100 + 0.6 x 300) / 400 = 0.65
    assert pooled["cardflow"]["utilisation"] == pytest.approx(0.6)
    assert pooled["easy-backfill"]["utilisation"] == pytest.approx(0.65)
    assert pooled["cardflow"]["windows_at_least_as_utilised"] == 1
    assert pooled["easy-backfill"]["windows_at_least_as_utilised"] == 1
    assert pooled["cardflow"]["core_wait_p95_min"] == pytest.approx(1.0)  # 39 of 40 waits are 60 s
    assert pooled["easy-backfill"]["core_wait_p95_min"] == pytest.approx(2.0)
    assert windows.verdict(pooled) == ("pooled core p95 wait 1 min vs 2 min (better); pooled utilisation "
                                       "60.00% vs 65.00% (LOWER).")


def test_the_section_names_the_verdict_and_a_row_per_window():
    results = [result(date(2017, 1, 1), 100.0, 0.9, 0.8, [60.0], [120.0])]
    text = "\n".join(windows.section_lines(results, elapsed_s=90.0, days=4))
    assert "Verdict with the default synthesis seed, pooled over all windows: pooled core p95 wait 1 min vs 2 min (better)" in text
    assert "| 2017-01-01 | 10 | 8 | 100% | 90.0% | 80.0% | 1m | 2m |" in text
    assert "img/policies-philly-windows.png" in text


def test_the_seed_verdict_counts_the_seeds_where_each_goal_holds():
    by_seed = {42: [result(date(2017, 1, 1), 100.0, 0.70, 0.69, [60.0], [120.0])],
               1: [result(date(2017, 1, 1), 100.0, 0.70, 0.72, [60.0], [120.0])]}
    assert windows.seeds_verdict(by_seed) == (
        "over 2 synthesis seeds, cardflow's pooled core p95 wait is lower in 2 of 2; its pooled utilisation "
        "matches or beats easy-backfill's in 1 of 2 (mean difference -0.50 points, from -2.00 to +1.00).")
    assert windows.seed_rows(by_seed)[1] == ["1", "70.00%", "72.00%", "-2.00", "1m", "2m"]


def test_the_all_seeds_difference_is_capacity_weighted_with_an_interval_around_it():
    by_seed = {42: [result(date(2017, 1, 1), 100.0, 0.70, 0.69, [60.0], [120.0]),
                    result(date(2017, 1, 5), 300.0, 0.70, 0.70, [60.0], [120.0])],
               1: [result(date(2017, 1, 1), 100.0, 0.70, 0.72, [60.0], [120.0])]}
    point, low, high = windows.all_seeds_difference(by_seed)
    assert point == pytest.approx((100 * 0.01 + 300 * 0.0 + 100 * -0.02) / 500)  # -0.2 points
    assert -0.02 - 1e-9 <= low <= point <= high <= 0.01 + 1e-9  # resampled means stay within the pairs' range
    assert windows.all_seeds_difference(by_seed) == (point, low, high)  # fixed RNG seed: reproducible
    assert windows.all_seeds_line(by_seed).startswith(
        "Every seed and window together (3 pairs): cardflow's utilisation minus easy-backfill's, pooled, -0.20 points")
