"""Deadlines in the queue order: within a class an earlier deadline goes first, never above a higher class."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from shared.scheduling.model import PriorityClass, QueuedTask
from shared.scheduling.ordering import order_key, order_queue
from shared.scheduling.policies import POLICIES

from .builders import HOUR, NOW, a_node, a_task, grants, run

CARDFLOW = POLICIES["cardflow"]


def ids(tasks: list[QueuedTask]) -> list[str]:
    return [task.task_id for task in tasks]


def test_a_deadline_goes_first_within_its_class_but_not_above_a_higher_class():
    queue = [
        a_task("core-none").core().submitted(50).build(),
        a_task("std-late").deadline(NOW + 5 * HOUR).submitted(10).build(),
        a_task("std-soon").deadline(NOW + HOUR).submitted(40).build(),
        a_task("std-high").priority(9).submitted(0).build(),
        a_task("opp-soon").opportunistic().deadline(NOW).build(),
    ]
    assert ids(order_queue(queue, CARDFLOW, NOW)) == ["core-none", "std-soon", "std-late", "std-high", "opp-soon"]


def test_only_the_cardflow_order_looks_at_deadlines():
    queue = [a_task("soon").deadline(NOW).submitted(10).build(), a_task("first").submitted(0).build()]
    for name in ("fifo", "priority", "easy-backfill"):
        assert ids(order_queue(queue, POLICIES[name], NOW))[0] == "first"


def test_the_earlier_deadline_gets_the_last_gpus():
    tasks = [a_task("no-deadline").gpus(8).submitted(0), a_task("deadline").gpus(8).submitted(100).deadline(NOW + HOUR)]
    assert list(grants(run([a_node("n1").free(8)], tasks, headroom=0.0))) == ["deadline"]


classes = st.sampled_from(list(PriorityClass))
tasks = st.builds(
    lambda i, c, p, s, d: replace(a_task(f"t{i}").priority(p).submitted(s).build(), priority_class=c, deadline=d),
    st.integers(0, 10**6), classes, st.integers(-3, 3), st.floats(0, 10 * HOUR), st.none() | st.floats(NOW, NOW + 10 * HOUR),
)


@given(st.lists(tasks, max_size=40, unique_by=lambda t: t.task_id))
def test_deadline_order_properties(queue: list[QueuedTask]):
    ordered = order_queue(queue, CARDFLOW, NOW)
    assert ids(ordered) == ids(sorted(queue, key=lambda task: order_key(task, CARDFLOW, NOW)))
    for earlier, later in zip(ordered, ordered[1:]):
        assert earlier.priority_class.rank <= later.priority_class.rank  # never above a higher class
        if earlier.priority_class == later.priority_class:
            assert not (earlier.deadline is None and later.deadline is not None)  # deadlines first
            if earlier.deadline is not None and later.deadline is not None:
                assert earlier.deadline <= later.deadline  # earlier deadline first
