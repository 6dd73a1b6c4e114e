"""A queue kept sorted between cycles (`OrderedQueue`) orders and plans exactly as a fresh one (hypothesis).

Generated queues go through a sequence of changes (tasks arrive, leave, change) and cycles at later
and later times; after every change the kept queue must give the same order as sorting its tasks
afresh, for every order, aging rate and `now`, and `plan()` the same plan — also on queues of a few
repeated shapes, where the walk over a kept queue takes its shortcuts (`Cycle._walk_settled`).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling.model import CardOption, DeferralReason, Node, PriorityClass, QueuedTask, RunningLease, Snapshot
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordered_queue import OrderedQueue, aging_rate, kept_key
from shared.scheduling.queue_columns import flags_of, grace_bits, longest_runtime, runtimes_of
from shared.scheduling.ordering import order_queue, walk_order
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from tests.unit.scheduling.test_fast_paths import repetitive_scenarios
from tests.unit.scheduling.test_properties import NOW, scenarios

STANDARD = PriorityClass.STANDARD


def ids(tasks) -> list[str]:
    return [task.task_id for task in tasks]


@st.composite
def tasks(draw, task_id: str) -> QueuedTask:
    """Few distinct priorities and submit times (many near-ties), sometimes a deadline."""
    return QueuedTask(
        task_id=task_id, project="p0", priority_class=draw(st.sampled_from(tuple(PriorityClass))),
        priority=draw(st.integers(0, 3)), gpus=1,
        submitted_at=NOW - draw(st.one_of(st.sampled_from((0.0, 3600.0, 7200.0)), st.floats(0, 30 * 3600))),
        options=(CardOption("H100", 600.0, 1.0),),
        deadline=draw(st.one_of(st.none(), st.none(), st.sampled_from((NOW + 3600.0, NOW + 7200.0)))))


@st.composite
def histories(draw):
    """A first queue, then up to 6 steps of (tasks removed, tasks changed, tasks arrived, time passed)."""
    counter = iter(range(10_000))
    queue = {task.task_id: task for task in (draw(tasks(f"t{next(counter)}")) for _ in range(draw(st.integers(0, 15))))}
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        known = sorted(queue)
        leaving = draw(st.lists(st.sampled_from(known), unique=True, max_size=4)) if known else []
        staying = [task_id for task_id in known if task_id not in leaving]
        changing = draw(st.lists(st.sampled_from(staying), unique=True, max_size=3)) if staying else []
        changed = [replace(draw(tasks(task_id)), task_id=task_id) for task_id in changing]
        arriving = [draw(tasks(f"t{next(counter)}")) for _ in range(draw(st.integers(0, 4)))]
        steps.append(([queue[i] for i in leaving + changing], changed + arriving, draw(st.floats(0, 3 * 3600))))
        for task_id in leaving:
            del queue[task_id]
        queue.update({task.task_id: task for task in changed + arriving})
    policy = draw(st.one_of(st.sampled_from(sorted(POLICIES)).map(POLICIES.get),
                            st.floats(0.0, 50.0).map(lambda rate: Policy(aging_per_hour=rate))))
    return [*_first_queue(steps, queue)], steps, policy


def _first_queue(steps, final):
    """The queue before the steps, worked back from the final one."""
    queue = dict(final)
    for removed, added, _ in reversed(steps):
        for task in added:
            del queue[task.task_id]
        queue.update({task.task_id: task for task in removed})
    return queue.values()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_a_kept_queue_orders_exactly_as_a_fresh_sort_after_every_change(history) -> None:
    first, steps, policy = history
    kept, now = OrderedQueue.of(first, policy), NOW
    assert order_queue(kept, policy, now) == order_queue(list(reversed(first)), policy, now)
    for removed, added, elapsed in steps:
        kept, now = kept.changed(added, removed), now + elapsed
        assert len(kept) == len({task.task_id for task in kept})
        assert order_queue(kept, policy, now) == order_queue(list(reversed(list(kept))), policy, now)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_a_queue_made_afresh_is_sorted_by_the_kept_key_whatever_the_input_order(history, data) -> None:
    """`OrderedQueue.of` sorts by class, then one float per task, then only the runs of equal floats by the rest
    of `kept_key`: the order of a plain sort by the kept key (near-ties and equal keys drawn often), and the
    `aged` column is each task's."""
    first, _, policy = history
    shuffled = data.draw(st.permutations(first))
    kept, rate = OrderedQueue.of(shuffled, policy), aging_rate(policy)
    assert list(kept) == sorted(first, key=lambda task: kept_key(task, policy.order, rate))
    assert list(kept.aged) == [rate * task.submitted_at - task.priority for task in kept]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(), later=st.floats(0, 5 * 3600))
def test_plan_of_a_kept_queue_is_the_plan_of_the_same_tasks(scenario, later) -> None:
    snapshot, queue, policy = scenario
    kept = OrderedQueue.of(queue, policy)
    assert plan(snapshot, kept, policy, NOW + later) == plan(snapshot, list(reversed(queue)), policy, NOW + later)
    other = replace(policy, aging_per_hour=policy.aging_per_hour + 1.0)  # kept for another rate: sorted afresh
    assert plan(snapshot, kept, other, NOW + later) == plan(snapshot, queue, other, NOW + later)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=repetitive_scenarios(), gate=st.booleans(), kept_for_grace=st.sampled_from((None, 0.0, 1800.0, 7200.0)))
def test_the_walk_over_a_kept_queue_defers_repeated_shapes_exactly_as_the_full_walk(scenario, gate, kept_for_grace) -> None:
    """Queues cut from a few shapes: once the reservation is settled, most tasks take the kept queue's
    shortcut (deferred like an earlier task of their shape, or by their flags) — also when the queue was
    kept for another preemption grace (its `grace_bits` are then worked out afresh)."""
    snapshot, queue, policy = scenario
    policy = replace(policy, readiness_gate=gate)
    kept_for = policy if kept_for_grace is None else replace(policy, preempt_after_s=kept_for_grace)
    assert plan(snapshot, OrderedQueue.of(queue, kept_for), policy, NOW) == plan(snapshot, queue, policy, NOW)


def test_keys_that_round_together_now_are_ordered_by_submit_time_as_in_a_fresh_sort() -> None:
    """Two tasks whose `now`-free parts differ only by rounding (priority 1 submitted an hour after a
    priority 0 one, aging 1 point per hour) can have equal float keys at this `now`: a fresh sort puts
    the earlier submitted first, whatever the order of their `now`-free parts."""
    policy = Policy(aging_per_hour=1.0)
    for step in range(20_000):
        at = NOW - 36_000.0 + 1.37 * step
        early = QueuedTask("early", "p0", STANDARD, 0, 1, at, (CardOption("H100", 60.0, 1.0),))
        late = QueuedTask("late", "p0", STANDARD, 1, 1, at + 3600.0, (CardOption("H100", 60.0, 1.0),))
        kept = OrderedQueue.of([early, late], policy)
        if ids(kept) == ["late", "early"] and ids(order_queue([late, early], policy, NOW)) == ["early", "late"]:
            break
    else:
        pytest.fail("no submit time where the now-free parts round the other way than the keys at NOW")
    assert ids(order_queue(kept, policy, NOW)) == ["early", "late"]


def test_removing_a_task_that_is_not_queued_is_refused() -> None:
    task = QueuedTask("t", "p0", STANDARD, 0, 1, NOW, ())
    with pytest.raises(ValueError):
        OrderedQueue.of([], Policy()).changed(removed=[task])
    with pytest.raises(ValueError):
        OrderedQueue.of([task], Policy()).changed(added=[task])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_a_filtered_or_partly_replaced_copy_becomes_a_kept_queue_of_exactly_those_tasks(history, data) -> None:
    """What the dispatcher's governance gate does to the kept queue: some tasks dropped, some replaced."""
    first, _, policy = history
    kept = OrderedQueue.of(first, policy)
    gated = [replace(task, approved=False) if data.draw(st.booleans()) else task
             for task in kept if data.draw(st.booleans())]
    assert order_queue(kept.with_tasks(gated), policy, NOW) == order_queue(gated, policy, NOW)
    assert kept.with_tasks(kept) is kept


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), core_options=st.lists(st.sampled_from(("H100", "A100", "L40S")), unique=True,
                                                  min_size=1, max_size=3))
def test_the_columns_carried_through_changes_are_those_of_a_queue_made_afresh(history, core_options) -> None:
    """Ids, flags, projects, submit times, longest runtimes, shapes, the core tasks' GPUs per card type
    (the headroom's queued core demand) and which neighbours' `aged` values are near (`near_next`) are updated
    with each change, not recounted: after every change they equal a fresh queue's, and its tasks'."""
    first, steps, policy = history

    def widened(tasks):  # core tasks ask for several card types and GPUs, so the counts can cancel out
        return [replace(task, gpus=1 + len(task.task_id) % 3, project=f"p{len(task.task_id) % 2}",
                        options=tuple(CardOption(card, 600.0 * (1 + (index + len(task.task_id)) % 3), 1.0)
                                      for index, card in enumerate(core_options)))
                if task.priority_class == PriorityClass.CORE else task for task in tasks]

    kept = OrderedQueue.of(widened(first), policy)
    for removed, added, _ in steps:
        kept = kept.changed(widened(added), widened(removed))
        fresh = OrderedQueue.of(list(kept), policy)
        assert (kept.task_ids, kept.projects) == (fresh.task_ids, fresh.projects) == (ids(kept), [t.project for t in kept])
        assert list(kept.flags) == list(fresh.flags)
        assert kept.core_gpus == fresh.core_gpus == _core_gpus(kept)
        assert list(kept.submitted) == [task.submitted_at for task in kept]
        assert list(kept.longest) == [max(option.runtime_s for option in task.options) for task in kept]
        assert [kept.shape_table[shape] for shape in kept.shapes] == [
            (task.gpus, task.heavy, tuple(option.card_type for option in task.options)) for task in kept]
        assert len({id(project) for project in kept.projects}) == len(set(kept.projects))  # one object per name
        assert [list(runtimes) for runtimes in kept.runtimes] == [[option.runtime_s for option in task.options] for task in kept]
        assert list(kept.near_next) == list(fresh.near_next)  # the pairs whose keys `ordering` compares
        assert list(kept.grace_bits) == list(fresh.grace_bits) == [
            grace_bits([option.runtime_s for option in task.options], policy.preempt_after_s) for task in kept]


def _core_gpus(tasks) -> dict[str, int]:
    counted: dict[str, int] = {}
    for task in tasks:
        if task.priority_class == PriorityClass.CORE:
            for option in task.options:
                counted[option.card_type] = counted.get(option.card_type, 0) + task.gpus
    return {card: gpus for card, gpus in counted.items() if gpus}


def test_once_nothing_is_free_a_core_task_later_in_the_kept_queue_still_preempts() -> None:
    """The closed walk over a kept queue defers runs of tasks from its columns, but a ready core task in
    it still goes its own way: here `a` holds the reservation (n0) and no GPU is free, then `b` (past its
    grace) preempts the opportunistic lease on n2 — as on a list (fails if the columns defer `b` too)."""
    core, opportunistic = PriorityClass.CORE, PriorityClass.OPPORTUNISTIC
    nodes = tuple(Node(f"n{index}", "H100", 8, frozenset()) for index in range(3))

    def lease(index: int, klass: PriorityClass, hours: float) -> RunningLease:
        return RunningLease(f"l{index}", f"r{index}", "p", klass, f"n{index}", "H100", tuple(range(8)), NOW - 600,
                            NOW + hours * 3600, NOW - 60, checkpoints_on_preempt=klass == opportunistic)

    snapshot = Snapshot(nodes, (lease(0, opportunistic, 10), lease(1, STANDARD, 5), lease(2, opportunistic, 10)), {})
    queue = [QueuedTask("a", "p", core, 9, 8, NOW, (CardOption("H100", 20 * 3600.0, 1.0),)),
             QueuedTask("b", "p", core, 0, 4, NOW - 7200, (CardOption("H100", 3600.0, 1.0),)),
             QueuedTask("c", "p", STANDARD, 0, 1, NOW - 7200, (CardOption("H100", 3600.0, 1.0),))]
    policy = POLICIES["cardflow"]
    listed = plan(snapshot, queue, policy, NOW)
    assert [(d.task_id, d.reason) for d in listed.deferrals] == [
        ("a", DeferralReason.RESERVED), ("b", DeferralReason.AWAITING_PREEMPTION), ("c", DeferralReason.NO_CAPACITY)]
    assert plan(snapshot, OrderedQueue.of(queue, policy), policy, NOW) == listed


def test_the_longest_runtime_of_a_task_is_of_its_options() -> None:
    task = QueuedTask("t", "p0", STANDARD, 0, 1, NOW, (CardOption("H100", 600.0, 1.0), CardOption("A10", 2400.0, 1.0),
                                                       CardOption("T4", 900.0, 1.0)))
    assert longest_runtime(task) == 2400.0
    assert longest_runtime(replace(task, options=())) == 0.0
    assert longest_runtime(replace(task, options=(CardOption("H100", float("nan"), 1.0),))) == float("inf")


def test_grace_bits_say_which_options_return_within_the_grace() -> None:
    assert grace_bits([600.0, 2400.0, 900.0], 1800.0) == 0b1101  # a leading 1, then per option in order
    assert grace_bits([], 1800.0) == 1
    assert grace_bits([1.0] * 63, 1800.0) == -1  # more than a 64-bit column holds


def test_near_next_marks_the_neighbours_whose_keys_ordering_compares() -> None:
    """A pair whose `aged` values are closer than `NEAR_GAP` is marked (and a pair of equal ones); a pair far apart
    is not, nor the last task; `ordering` then orders the queue as a fresh sort, equal keys by submit time."""
    policy = Policy(aging_per_hour=0.0, order="priority")
    at = NOW - 3600.0
    queue = [QueuedTask(task_id, "p0", STANDARD, priority, 1, submitted, (CardOption("H100", 60.0, 1.0),))
             for task_id, priority, submitted in (("a", 5, at), ("b", 3, at + 1.0), ("c", 3, at), ("d", 0, at))]
    kept = OrderedQueue.of(queue, policy)
    assert ids(kept) == ["a", "c", "b", "d"]
    assert list(kept.near_next) == [0, 1, 0, 0]
    assert ids(order_queue(kept, policy, NOW)) == ids(order_queue(queue, policy, NOW)) == ["a", "c", "b", "d"]


def assert_columns_describe(columns, tasks, grace_s: float) -> None:
    """Every per-task column of a walk says what the task at its position says."""
    runtimes = [runtimes_of(task) for task in tasks]
    assert list(columns.task_ids) == ids(tasks)
    assert list(columns.flags) == [flags_of(task) for task in tasks]
    assert list(columns.projects) == [task.project for task in tasks]
    assert list(columns.submitted) == [task.submitted_at for task in tasks]
    assert list(columns.longest) == [longest_runtime(task) for task in tasks]
    assert list(columns.runtimes) == runtimes
    assert list(columns.grace_bits) == [grace_bits(task_runtimes, grace_s) for task_runtimes in runtimes]
    assert [columns.shape_table[shape] for shape in columns.shapes] == [
        (task.gpus, task.heavy, tuple(option.card_type for option in task.options)) for task in tasks]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_the_walk_columns_of_a_kept_queue_follow_its_order_at_every_now(history) -> None:
    """Runs of equal keys re-sorted by (submit time, id) move only their own entries of the columns
    (`OrderedQueue.walk_columns_moved`); with deadlines every column follows the new order too."""
    first, steps, policy = history
    kept, now = OrderedQueue.of(first, policy), NOW
    for removed, added, elapsed in [((), (), 0.0), *steps]:
        kept, now = kept.changed(added, removed), now + elapsed
        ordered, columns = walk_order(kept, policy, now)
        assert ordered == order_queue(list(reversed(list(kept))), policy, now)
        if columns is not None:
            assert_columns_describe(columns, ordered, policy.preempt_after_s)


def _tied_pair(policy: Policy) -> tuple[QueuedTask, QueuedTask]:
    """Two standard tasks whose keys are equal at NOW though their `now`-free parts put the later submitted first."""
    for step in range(20_000):
        at = NOW - 36_000.0 + 1.37 * step
        early = QueuedTask("early", "p0", STANDARD, 0, 1, at, (CardOption("H100", 60.0, 1.0),))
        late = QueuedTask("late", "p1", STANDARD, 1, 2, at + 3600.0, (CardOption("L40S", 90.0, 1.0),), heavy=True)
        if ids(OrderedQueue.of([early, late], policy)) == ["late", "early"] and ids(
                order_queue([late, early], policy, NOW)) == ["early", "late"]:
            return early, late
    pytest.fail("no submit time where the now-free parts round the other way than the keys at NOW")


@pytest.mark.parametrize("deadline", [False, True], ids=["no deadline", "a deadline"])
def test_one_tie_in_a_long_kept_queue_swaps_two_tasks_and_their_columns(deadline: bool) -> None:
    """One pair of equal keys among thousands of tasks (the headline's 'no opportunistic work' variant has one among
    80,000): the order is the fresh sort's, and the columns swap the pair's entries, every other entry in place."""
    policy = Policy(aging_per_hour=1.0)
    early, late = _tied_pair(policy)
    others = [QueuedTask(f"t{index:05d}", "p2", PriorityClass(("core", "standard", "opportunistic")[index % 3]),
                         index % 7, 1 + index % 4, NOW - 50_000.0 - 13.0 * index, (CardOption("A10", 600.0, 1.0),),
                         deadline=NOW + 3600.0 if deadline and index == 5 else None)
              for index in range(3_000)]
    kept = OrderedQueue.of([*others, early, late], policy)
    ordered, columns = walk_order(kept, policy, NOW)
    assert ordered == order_queue([late, *reversed(others), early], policy, NOW)
    assert ids(ordered).index("early") == ids(ordered).index("late") - 1
    assert_columns_describe(columns, ordered, policy.preempt_after_s)
