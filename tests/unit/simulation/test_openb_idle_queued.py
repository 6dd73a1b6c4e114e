"""bench/openb_idle_queued.py: idle GPU-time while ready work waits, split into what a waiting task could use and
what it could not (by card type and why), counted inside the window only."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from shared.scheduling.model import CardOption, Node, PriorityClass, QueuedTask
from tests.helpers.bench_scripts import load_bench_script

probe = load_bench_script("openb_idle_queued")


def test_idle_time_is_split_by_use_and_clipped_to_the_window() -> None:
    samples = [
        (0.0, 4, Counter({"usable": 2}), Counter({"G2 (no waiting task takes it)": 8})),  # 10 s, 5 inside the window
        (10.0, 8, Counter(), Counter()),  # nothing waits: not counted
        (20.0, 6, Counter(), Counter({"T4 (too few free on the node)": 1})),  # 10 s
        (30.0, 0, Counter(), Counter()),
    ]
    simulation = SimpleNamespace(samples=samples, lo=5.0, hi=40.0)
    usable, unusable_total, unusable = probe.idle_split(simulation)
    assert usable == 2 * 5
    assert unusable == {"G2 (no waiting task takes it)": 8 * 5, "T4 (too few free on the node)": 1 * 10}
    assert unusable_total == 8 * 5 + 10


def _task(task_id: str, gpus: int, *card_types: str) -> QueuedTask:
    return QueuedTask(task_id, "p", PriorityClass.STANDARD, 0, gpus, 0.0,
                      tuple(CardOption(card, 3600.0, 1.0) for card in card_types))


def test_a_free_gpu_is_usable_only_where_a_waiting_task_takes_its_card_type_and_fits_the_node() -> None:
    nodes = [Node("n1", "T4", 8, frozenset({0, 1})), Node("n2", "T4", 8, frozenset({3})),
             Node("n3", "G2", 8, frozenset(range(8))), Node("n4", "T4", 8, frozenset())]
    usable, unusable = probe.free_split(nodes, [_task("a", 2, "T4"), _task("b", 4, "T4", "A10")])
    assert usable == {"usable": 2}  # n1: the 2-GPU task fits
    assert unusable == {"T4 (too few free on the node)": 1, "G2 (no waiting task takes it)": 8}
    assert probe.free_split(nodes, []) == ({}, {"T4 (no waiting task takes it)": 3, "G2 (no waiting task takes it)": 8})
