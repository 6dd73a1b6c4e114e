"""bench/grid_paired.py: a variant against the preset paired per unit — the per-cell verdict reads the 95%
intervals (worse only when the whole interval is on the wrong side), hand-computed."""

from __future__ import annotations

import pytest
from tests.helpers.bench_scripts import load_bench_script

paired = load_bench_script("grid_paired")


def result(useful: float, waits=(60.0,), preemptions: int = 0, unfinished: int = 0) -> dict:
    return {"useful_gpu_s": useful, "capacity_gpu_s": 100.0, "busy_queued_gpu_s": 90.0, "offered_queued_gpu_s": 100.0,
            "core_waits_s": list(waits), "unfinished": unfinished, "preemptions": preemptions}


def test_the_utilisation_difference_sums_gpu_seconds_and_the_ratio_pools_waits():
    units = [(result(81, [60, 120]), result(80, [120, 240])), (result(70, [60]), result(72, [120]))]
    assert paired.utilisation_diff(units) == pytest.approx(100 * (1 - 2) / 200)
    assert paired.core_p95_ratio(units) == pytest.approx(114 / 228)  # numpy's linear p95 of 60, 60, 120 / 120, 120, 240


@pytest.mark.parametrize(("units", "verdict"), [
    ([(result(80), result(80))] * 4, "alike"),
    ([(result(79), result(80))] * 4, "**worse**"),  # every unit loses a point: the interval is below 0
    ([(result(81), result(80))] * 4, "better"),
    ([(result(79), result(80)), (result(81), result(80))] * 2, "within noise"),
    ([(result(80, [30]), result(80, [60]))] * 4, "better"),  # core p95 halves
    ([(result(80, [90]), result(80, [60]))] * 4, "**worse**"),
    ([(result(80, unfinished=1), result(80))] * 4, "**worse**"),
])
def test_a_cell_is_worse_only_when_its_whole_interval_says_so(units, verdict):
    diffs, ratios = paired._draws(units, 200)
    assert paired.cell_verdict(units, paired._interval(diffs), paired._interval(ratios)) == verdict


def test_the_per_cell_table_has_a_row_per_cell_and_a_pooled_row():
    grid = paired.grid
    cells = {grid.Cell(0.8, 0.0, 1.0, "default"): [(result(81), result(80))] * 2,
             grid.Cell(0.0, 0.0, 1.0, "default"): [(result(80), result(80))] * 2}
    lines = paired.per_cell_table(cells, resamples=50)
    assert len(lines) == 2 + 2 + 1
    assert lines[2].startswith("| ckpt 0 · delay 0 · σ 1 · default | 2 | +0.00") and lines[2].endswith("| alike |")
    assert lines[3].endswith("| better |") and lines[4].startswith("| **pooled over every cell** | 4 | +0.50")


def test_the_summary_line_and_the_pooled_row_give_the_same_interval():
    grid = paired.grid
    mixed = [(result(70 + 3 * n), result(80)) for n in range(8)]  # every unit differs: the order picks the draws
    cells = {grid.Cell(0.8, 0.0, 1.0, "core-heavy"): mixed[:4], grid.Cell(0.0, 0.0, 1.0, "default"): mixed[4:]}
    summary = paired.paired(paired.pooled_units(cells), resamples=50)
    pooled_row = paired.per_cell_table(cells, resamples=50)[-1]
    interval = summary.split("(95% interval ")[1].split(";")[0]
    assert f"({interval})" in pooled_row
