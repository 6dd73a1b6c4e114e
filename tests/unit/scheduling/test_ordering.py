"""Queue order: class, (aged) priority, submit time, id — and the fifo/priority variants."""

from __future__ import annotations

import random

import pytest

from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordering import effective_priority, order_key, order_queue
from shared.scheduling.policies import POLICIES

from .builders import HOUR, NOW, a_node, a_task, grants, run


def ids(tasks) -> list[str]:
    return [task.task_id for task in tasks]


def test_class_beats_priority_and_age():
    queue = [
        a_task("opp").opportunistic().priority(99).submitted(0).build(),
        a_task("std").standard().priority(50).submitted(0).build(),
        a_task("core").core().priority(0).submitted(NOW).build(),
    ]
    assert ids(order_queue(queue, Policy(), NOW)) == ["core", "std", "opp"]


def test_higher_priority_first_then_submit_time_then_id():
    queue = [
        a_task("b").priority(1).submitted(10).build(),
        a_task("a").priority(1).submitted(10).build(),
        a_task("early").priority(1).submitted(5).build(),
        a_task("high").priority(2).submitted(10).build(),
    ]
    assert ids(order_queue(queue, Policy(aging_per_hour=0.0), NOW)) == ["high", "early", "a", "b"]


def test_aging_lets_a_long_waiting_task_overtake_a_higher_priority_one():
    old_low = a_task("old-low").priority(0).submitted(NOW - 5 * HOUR).build()
    new_high = a_task("new-high").priority(3).submitted(NOW).build()
    assert effective_priority(old_low, Policy(aging_per_hour=1.0), NOW) == pytest.approx(5.0)
    assert ids(order_queue([new_high, old_low], Policy(aging_per_hour=1.0), NOW)) == ["old-low", "new-high"]
    assert ids(order_queue([new_high, old_low], Policy(aging_per_hour=0.5), NOW)) == ["new-high", "old-low"]


def test_aging_never_crosses_classes():
    ancient = a_task("ancient-opp").opportunistic().submitted(NOW - 1000 * HOUR).build()
    fresh = a_task("fresh-core").core().submitted(NOW).build()
    assert ids(order_queue([ancient, fresh], Policy(aging_per_hour=10.0), NOW)) == ["fresh-core", "ancient-opp"]


def test_priority_order_ignores_aging():
    old_low = a_task("old-low").priority(0).submitted(NOW - 100 * HOUR).build()
    new_high = a_task("new-high").priority(3).submitted(NOW).build()
    assert ids(order_queue([old_low, new_high], POLICIES["priority"], NOW)) == ["new-high", "old-low"]


def test_fifo_is_submit_time_then_id_regardless_of_class():
    queue = [
        a_task("late-core").core().submitted(20).build(),
        a_task("b").opportunistic().submitted(10).build(),
        a_task("a").standard().submitted(10).build(),
    ]
    assert ids(order_queue(queue, POLICIES["fifo"], NOW)) == ["a", "b", "late-core"]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_order_is_the_stated_key_and_independent_of_input_order(name):
    rng = random.Random(7)
    classes = ("core", "standard", "opportunistic")
    queue = [_random_task(rng, index, classes) for index in range(200)]
    policy = POLICIES[name]
    expected = sorted(queue, key=lambda task: order_key(task, policy, NOW))
    for _ in range(3):
        rng.shuffle(queue)
        assert ids(order_queue(queue, policy, NOW)) == ids(expected)


def _random_task(rng: random.Random, index: int, classes):
    builder = a_task(f"t{index}").priority(rng.randint(0, 3)).submitted(float(rng.randint(0, 20)) * HOUR)
    return getattr(builder, rng.choice(classes))().build()


def test_huge_priorities_fall_back_to_the_exact_order():
    queue = [a_task("small").priority(1).build(), a_task("huge").priority(10**12).build()]
    assert ids(order_queue(queue, Policy(), NOW)) == ["huge", "small"]


def test_unknown_order_is_refused():
    with pytest.raises(ValueError, match="unknown queue order"):
        order_queue([], Policy(order="random"), NOW)


def test_the_first_in_order_gets_the_last_gpu():
    result = run([a_node("n1").free(1)], [a_task("low").priority(1), a_task("high").priority(2)], headroom=0.0)
    assert list(grants(result)) == ["high"]
