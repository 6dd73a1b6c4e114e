"""The grid part of the policy benchmark: cell selection, cache keys, parts, pooling and verdicts
(hand-computed)."""

from __future__ import annotations

import pytest

from shared.scheduling.policies import POLICIES
from tests.helpers.bench_scripts import load_bench_script

grid = load_bench_script("policies_grid")

CELL = grid.Cell(0.8, 0.25, 0.6, "default")
NONE_CHECKPOINT = grid.Cell(0.0, 0.25, 0.6, "default")


def result(useful: float, capacity: float, waits, busy=90.0, offered=100.0, unfinished=0, preemptions=0):
    return {"useful_gpu_s": useful, "capacity_gpu_s": capacity, "busy_queued_gpu_s": busy,
            "offered_queued_gpu_s": offered, "core_waits_s": list(waits), "unfinished": unfinished,
            "preemptions": preemptions}


def test_the_grid_has_36_cells_and_filters_select_by_value():
    cells = grid.all_cells()
    assert len(cells) == 36 and len(set(cells)) == 36
    chosen = grid.select_cells(cells, ["checkpoint=0,0.8", "mix=core-heavy", "sigma=0.6"])
    assert {(c.checkpoint_share, c.noise_sigma, c.class_mix) for c in chosen} == {
        (0.0, 0.6, "core-heavy"), (0.8, 0.6, "core-heavy")}
    assert len(chosen) == 4  # x 2 delay shares
    assert grid.select_cells(cells, ["sigma=1"]) == grid.select_cells(cells, ["sigma=1.0"]) != []
    with pytest.raises(ValueError, match="bad cell filter"):
        grid.select_cells(cells, ["ckpt=0"])


def test_a_cell_sets_the_synthesis_and_its_goal():
    params = CELL.params()
    assert (params.checkpoint_share, params.ready_share, params.estimate_sigma) == (0.8, 0.25, 0.6)
    assert params.class_mix == {"core": 0.2, "standard": 0.5, "opportunistic": 0.3}
    assert (CELL.goal_ratio, NONE_CHECKPOINT.goal_ratio) == (0.5, 0.8)


def test_cache_keys_leave_out_what_a_run_provably_ignores():
    easy, cardflow = POLICIES["easy-backfill"], POLICIES["cardflow"]
    other_checkpoints = grid.Cell(0.5, 0.25, 0.6, "default")
    assert grid.Run(CELL, "2017-10-03", 42, easy).key("c") == grid.Run(other_checkpoints, "2017-10-03", 42, easy).key("c")
    assert grid.Run(CELL, "2017-10-03", 42, cardflow).key("c") != grid.Run(other_checkpoints, "2017-10-03", 42, cardflow).key("c")
    core_heavy = grid.Cell(0.8, 0.25, 0.6, "core-heavy")
    assert grid.Run(CELL, "openb", 42, cardflow).key("c") == grid.Run(core_heavy, "openb", 42, cardflow).key("c")
    assert grid.Run(CELL, "2017-10-03", 42, cardflow).key("c") != grid.Run(core_heavy, "2017-10-03", 42, cardflow).key("c")
    assert grid.Run(CELL, "openb", 42, cardflow).key("c") != grid.Run(CELL, "openb", 42, cardflow).key("d")
    assert grid.Run(CELL, "openb", 42, cardflow).key("c") != grid.Run(CELL, "openb", 1, cardflow).key("c")


def test_policy_fields_added_later_leave_the_key_at_their_neutral_value_and_variants_change_it():
    cardflow = grid.variant(POLICIES["cardflow"], [  # the preset until 2026-12-03 (the fillers until 2026-12-04)
        "holder_reclaims_within_headroom=false", "checkpointing_standard_borrows=false", "fillers_yield_at_once=false",
        "fillers_after_opportunistic=false"])
    key = grid.Run(CELL, "2017-10-03", 42, cardflow).key("c")
    assert key == "59e1b63c2cbf81966e75658c"  # as before those fields existed (main at 0bad872): earlier runs count
    assert grid.Run(CELL, "2017-10-03", 42, POLICIES["cardflow"]).key("c") != key  # a field switched on in the preset
    variant = grid.variant(cardflow, ["headroom_counts_reclaimable_only=true", "max_heavy_per_node=3"])
    assert (variant.headroom_counts_reclaimable_only, variant.max_heavy_per_node, variant.name) == (True, 3, "cardflow")
    assert isinstance(variant.max_heavy_per_node, int)
    assert grid.Run(CELL, "2017-10-03", 42, variant).key("c") != key
    with pytest.raises(ValueError, match="bad policy setting 'lane=1'"):
        grid.variant(cardflow, ["lane=1"])


def test_parts_split_the_runs_without_overlap():
    runs = grid.plan_runs([CELL, NONE_CHECKPOINT], [], [42, 1], [POLICIES["cardflow"], POLICIES["easy-backfill"]])
    assert len(runs) == 8  # 2 cells x openb x 2 seeds x 2 policies
    parts = [grid.part_of(runs, f"{k}/3") for k in (1, 2, 3)]
    assert sorted(map(len, parts)) == [2, 3, 3]
    assert sum(parts, []) and set(map(id, sum(parts, []))) == set(map(id, runs))
    with pytest.raises(ValueError):
        grid.part_of(runs, "4/3")


def test_pooled_numbers_sum_gpu_seconds_and_pool_every_core_wait():
    units = [grid.Unit(result(80, 100, [10, 20], busy=95), result(70, 100, [40, 80])),
             grid.Unit(result(30, 100, [30], busy=45, offered=50, unfinished=1), result(50, 100, [60]))]
    numbers = grid.pooled(units)
    assert numbers["cardflow.utilisation"] == pytest.approx(0.55)
    assert numbers["easy-backfill.utilisation"] == pytest.approx(0.60)
    assert numbers["utilisation_diff"] == pytest.approx(-0.05)
    assert numbers["cardflow.busy_when_queued"] == pytest.approx(140 / 150)
    assert numbers["cardflow.core_p95_s"] == pytest.approx(29.0)  # numpy's linear percentile of 10, 20, 30
    assert numbers["easy-backfill.core_p95_s"] == pytest.approx(78.0)  # of 40, 60, 80
    assert numbers["core_p95_ratio"] == pytest.approx(29 / 78)
    assert grid.verdict(CELL, numbers) == ["utilisation -5.00 points", "1 unfinished", "busy while queued 93.3%"]


def test_a_cell_meeting_every_goal_has_no_miss_and_the_ratio_goal_depends_on_checkpoints():
    numbers = grid.pooled([grid.Unit(result(80, 100, [60], busy=96, offered=100), result(80, 100, [100]))])
    assert numbers["core_p95_ratio"] == pytest.approx(0.6)
    assert grid.verdict(NONE_CHECKPOINT, numbers) == []
    assert grid.verdict(CELL, numbers) == ["core p95 ratio 0.60 > 0.5"]


def test_bootstrap_intervals_are_reproducible_and_bracket_a_steady_difference():
    units = [grid.Unit(result(80 + i, 100, [10 + i]), result(78 + i, 100, [20 + i])) for i in range(6)]
    first, again = grid.bootstrap(units, resamples=200), grid.bootstrap(units, resamples=200)
    assert first == again
    low, high = first["utilisation_diff"]
    assert low == pytest.approx(0.02) and high == pytest.approx(0.02)
    low, high = first["core_p95_ratio"]
    assert 0 < low <= high < 1


def _numbers(utilisation: float, p95_s: float, unfinished: int = 0) -> dict:
    return {"cardflow.utilisation": utilisation, "cardflow.core_p95_s": p95_s, "cardflow.unfinished": unfinished}


@pytest.mark.parametrize(("changed", "effect"), [
    (_numbers(0.7600, 600.0), "neutral"),
    (_numbers(0.7604, 590.0), "neutral"),  # within 0.05 points and 2%
    (_numbers(0.7600, 500.0), "helps"),
    (_numbers(0.7610, 600.0), "helps"),
    (_numbers(0.7590, 500.0), "hurts: utilisation -0.10 points"),
    (_numbers(0.7700, 700.0), "hurts: core p95 x1.17"),
    (_numbers(0.7600, 600.0, unfinished=1), "hurts: 1 unfinished"),
])
def test_a_variant_helps_hurts_or_is_neutral_against_the_preset(changed, effect):
    assert grid.variant_effect(_numbers(0.7600, 600.0), changed) == effect
