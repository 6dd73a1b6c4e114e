"""The shortcuts that make plan() fast at scale decide exactly as the straightforward code (hypothesis).

- `quota_balance.CoverageRule` (what `coverage` uses) against the rule as first written: accounts
  sorted, the first failing one blamed.
- `Cycle.walk` (which repeats a remembered failure for a task of the same shape, `_repeat_failure`,
  and reuses a capacity sentence while its card types keep their free GPUs, `Explainer`) against
  `consider` called for every task in a plain loop, attempting each in full and working every sentence
  out afresh: the same grants, preemptions, reservations, deferral reasons and sentences for every task,
  on generated snapshots whose queues repeat a few shapes (so the shortcuts are taken often) — over a
  list and over a kept queue (`OrderedQueue`, whose walk keys remembered failures by its shape numbers).
- `QuotaBook` (which keeps each rule's standing per project and card type until a charge) against one
  that works the standing out for every task, in the same comparison; and its kept refusals
  (`QuotaBook.refusals`, per project and (GPUs, card types) until the project's next charge) against it,
  with the runtime from which on each refuses (`quota.refused_from`) and its sentence around the need
  (`reasons.quota_exhausted_around`) against the bounds' arithmetic and the sentence said in full.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from math import inf, nextafter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling.cycle import Cycle
from shared.scheduling.explain import Explainer
from shared.scheduling.model import (
    CardOption,
    DeferralReason,
    Node,
    Plan,
    PriorityClass,
    QueuedTask,
    QuotaAccount,
    RunningLease,
    Snapshot,
)
from shared.scheduling.policy_knobs import HeadroomCoreDemand, Policy, PreemptAtOnce
from shared.scheduling.ordered_queue import OrderedQueue
from shared.scheduling.queue_columns import longest_runtime
from shared.scheduling.ordering import order_queue
from shared.scheduling import reasons
from shared.scheduling.quota import QuotaBook, StandingRefusal, refused_from
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from shared.scheduling.quota_balance import Coverage, CoverageVerdict, QuotaTerms, coverage
from tests.unit.scheduling.test_properties import _leases_on
from tests.unit.scheduling.policy_draws import standard_yield_knobs

NOW = 50_000.0
HOUR = 3600.0
CARDS = ("H100", "A10", "T4")
CLASSES = tuple(PriorityClass)


def first_written_coverage(accounts: Sequence[QuotaTerms], left: Mapping[str, float], project: str, card_type: str,
                           need: float, runtime_s: float, now: float, margin_s: float,
                           expiry_gate: bool) -> CoverageVerdict:
    """`quota_balance.coverage` as it was before `CoverageRule` (sorts and scans every time)."""
    applying = [a for a in accounts if a.applies_to(project, card_type)]
    if not applying:
        return CoverageVerdict(Coverage.UNLIMITED)
    in_force = sorted((a for a in applying if a.in_force(now)), key=lambda a: (a.valid_to, a.account_id))
    if not in_force:
        later = [a for a in applying if a.valid_from > now]
        if later:
            return CoverageVerdict(Coverage.NOT_YET_VALID, min(later, key=lambda a: (a.valid_from, a.account_id)))
        return CoverageVerdict(Coverage.EXPIRED, max(applying, key=lambda a: (a.valid_to, a.account_id)))
    paying = tuple(in_force)
    if expiry_gate:
        for account in in_force:
            if account.valid_to - now < runtime_s + margin_s:
                return CoverageVerdict(Coverage.EXPIRES_FIRST, account, paying)
    for account in sorted(in_force, key=lambda a: (left.get(a.account_id, a.gpu_hours), a.account_id)):
        if left.get(account.account_id, account.gpu_hours) < need:
            return CoverageVerdict(Coverage.EXHAUSTED, account, paying)
    return CoverageVerdict(Coverage.COVERED, None, paying)


accounts = st.lists(st.builds(
    lambda i, p, c, hours, start, length: QuotaTerms(f"q{i}", p, c, hours, NOW + start, NOW + start + length),
    st.integers(0, 5), st.sampled_from("ab"), st.none() | st.sampled_from(CARDS), st.sampled_from((0.0, 5.0, 50.0)),
    st.sampled_from((-10 * HOUR, -HOUR, 0.0, 60.0)), st.sampled_from((30.0, HOUR, 2 * HOUR, 10 * HOUR))), max_size=5)


@settings(max_examples=400)
@given(terms=accounts, spent=st.lists(st.sampled_from((0.0, 1.0, 5.0, 50.0)), min_size=6, max_size=6),
       project=st.sampled_from("ab"), card=st.sampled_from(CARDS), need=st.sampled_from((0.0, 1.0, 5.0, 40.0)),
       runtime=st.sampled_from((60.0, HOUR, 5 * HOUR)), margin=st.sampled_from((0.0, 600.0)), gate=st.booleans())
def test_coverage_blames_the_same_account_as_the_rule_first_written(terms, spent, project, card, need, runtime,
                                                                     margin, gate) -> None:
    left = {account.account_id: account.gpu_hours - spent[int(account.account_id[1:])] for account in terms}
    expected = first_written_coverage(terms, left, project, card, need, runtime, NOW, margin, gate)
    assert coverage(terms, left, project, card, need, runtime, NOW, margin, gate) == expected


class FreshExplainer(Explainer):
    """Works every capacity sentence out afresh (no cache)."""

    def no_capacity(self, task, options):
        self._no_room.clear()
        return super().no_capacity(task, options)

    def deferral(self, task, miss, misses, guard, wide=False):
        self._cache.clear()
        return super().deferral(task, miss, misses, guard, wide)


class FreshQuotaBook(QuotaBook):
    """Works each rule's standing out afresh for every task."""

    def usable_options(self, task):
        self._standings.clear()
        return super().usable_options(task)


class StraightCycle(Cycle):
    """A cycle that never repeats a remembered failure (every task is attempted in full) and works
    every capacity sentence and quota standing out afresh."""

    def __init__(self, snapshot: Snapshot, policy: Policy, now: float, queue: Sequence[QueuedTask] = ()) -> None:
        super().__init__(snapshot, policy, now, queue)
        self.explain = FreshExplainer(self.fleet, policy, now, self.borrowed)
        self.quota = FreshQuotaBook(snapshot.quotas, policy, now)

    def _repeat_failure(self, task: QueuedTask, options: Sequence[CardOption], shape: tuple) -> bool:
        return False


def straight_plan(snapshot: Snapshot, queue: Sequence[QueuedTask], policy: Policy, now: float) -> Plan:
    """plan() as first written: `consider` each task in order (no inlined walk), no repeated failures."""
    ordered = order_queue(queue, policy, now)
    cycle = StraightCycle(snapshot, policy, now, ordered)
    for position, task in enumerate(ordered):
        if cycle.closed:
            cycle.defer_rest(ordered[position:])
            break
        cycle.consider(task)
    return cycle.to_plan()


@st.composite
def repetitive_scenarios(draw):
    """A busy fleet of up to 8 nodes and a queue of up to 60 tasks cut from at most 6 shapes."""
    nodes, leases = [], []
    for index in range(draw(st.integers(1, 8))):
        size = draw(st.sampled_from((2, 4, 8)))
        node = Node(f"n{index}", draw(st.sampled_from(CARDS)), size,
                    draw(st.frozensets(st.integers(0, size - 1), max_size=size)), draw(st.integers(0, 2)))
        nodes.append(node)
        leases += draw(_leases_on(node))
    shapes = draw(st.lists(st.tuples(
        st.sampled_from(CLASSES), st.sampled_from((1, 1, 2, 4, 8, 12)), st.booleans(),
        st.sampled_from((None, 1800.0)), st.lists(st.sampled_from(CARDS), unique=True, min_size=1, max_size=3)),
        min_size=1, max_size=6))
    queue = []
    for index in range(draw(st.integers(1, 60))):
        klass, gpus, heavy, checkpoint, cards = draw(st.sampled_from(shapes))
        runtime = draw(st.sampled_from((120.0, 500.0, HOUR, 4 * HOUR, 20 * HOUR)))
        queue.append(QueuedTask(
            f"t{index}", f"p{draw(st.integers(0, 2))}", klass, draw(st.integers(0, 2)), gpus,
            NOW - draw(st.sampled_from((0.0, 300.0, 2 * HOUR))), tuple(CardOption(card, runtime, 1.0) for card in cards),
            data_ready=draw(st.booleans()) or draw(st.booleans()), heavy=heavy, checkpoint_interval_s=checkpoint))
    quotas = {}
    for project in ("p0", "p1"):
        if draw(st.booleans()):
            quotas[project] = QuotaAccount(project, draw(st.sampled_from((1.0, 20.0, 500.0))), 0.0,
                                           NOW + draw(st.sampled_from((HOUR, 30 * HOUR))))
    if draw(st.booleans()):
        quotas["p2-h100"] = QuotaAccount("p2", draw(st.sampled_from((2.0, 50.0))), 0.0, NOW + 30 * HOUR, "H100", "p2-h100")
    base = POLICIES[draw(st.sampled_from(sorted(POLICIES)))]
    policy = replace(base, headroom=draw(st.sampled_from((0.0, 0.1, 0.3))), preemption=draw(st.booleans()),
                     fill_reservations=draw(st.booleans()), max_heavy_per_node=draw(st.integers(1, 2)),
                     headroom_counts_reclaimable_only=draw(st.booleans()),
                     headroom_core_demand=draw(st.sampled_from(tuple(HeadroomCoreDemand))),
                     preemption_spares_ending=draw(st.booleans()), preempt_at_once=draw(st.sampled_from(tuple(PreemptAtOnce))),
                     preemption_budget_share=draw(st.sampled_from((0.0, 0.5, 1.0))),
                     preemption_budget_basis=draw(st.sampled_from(("wait", "drain"))),
                     standard_borrows_within_graces=draw(st.sampled_from((0.0, 0.5, 1.0, 3.0))),
                     checkpointing_standard_borrows=draw(st.booleans()), fillers_yield_at_once=draw(st.booleans()),
                     **draw(standard_yield_knobs()),
                     holder_reclaims_within_headroom=draw(st.booleans()),
                     reclaiming_holder_keeps_headroom=draw(st.booleans()),
                     fillers_after_opportunistic=draw(st.booleans()))
    if draw(st.booleans()):  # fifo interleaves classes: core tasks preempt between other tasks' failures
        policy = replace(policy, order="fifo", head_of_line_blocking=False, backfill=True)
    return Snapshot(tuple(nodes), tuple(leases), quotas), queue, policy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=repetitive_scenarios())
def test_repeating_a_failure_decides_exactly_as_attempting_every_task(scenario) -> None:
    snapshot, queue, policy = scenario
    fast, straight = plan(snapshot, queue, policy, NOW), straight_plan(snapshot, queue, policy, NOW)
    assert fast.grants == straight.grants
    assert fast.preemptions == straight.preemptions
    assert fast.reservations == straight.reservations
    assert fast.revisit_at == straight.revisit_at
    assert [(d.task_id, d.reason, d.detail) for d in fast.deferrals] == \
        [(d.task_id, d.reason, d.detail) for d in straight.deferrals]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=repetitive_scenarios())
def test_the_settled_walk_over_a_kept_queue_decides_exactly_as_attempting_every_task(scenario) -> None:
    """The walk over a kept queue (`Cycle._walk_settled`: failures remembered by the queue's shape
    numbers, `_walk_shape`) against the straight plan, not only against the walk over a list."""
    snapshot, queue, policy = scenario
    fast = plan(snapshot, OrderedQueue.of(queue, policy), policy, NOW)
    straight = straight_plan(snapshot, queue, policy, NOW)
    assert (fast.grants, fast.preemptions, fast.reservations, fast.revisit_at) == \
        (straight.grants, straight.preemptions, straight.reservations, straight.revisit_at)
    assert fast.deferrals == straight.deferrals


def _behind_a_reservation(priority_class: PriorityClass, submitted: float) -> tuple[Snapshot, QueuedTask, list[QueuedTask]]:
    """Two half-busy H100 nodes, a 16-GPU head task that must wait for both, and 20 small tasks of one
    shape behind its reservation, each with its own runtime."""
    nodes = tuple(Node(f"n{i}", "H100", 8, frozenset(range(4))) for i in range(2))
    leases = tuple(RunningLease(f"L{i}", f"run{i}", "p", PriorityClass.STANDARD, f"n{i}", "H100", (4, 5, 6, 7),
                                NOW - HOUR, NOW + HOUR) for i in range(2))
    head = QueuedTask("head", "p", priority_class, 9, 16, NOW, (CardOption("H100", HOUR, 1.0),))
    tail = [QueuedTask(f"t{i}", "p", priority_class, 0, 2, submitted, (CardOption("H100", (5 + i) * HOUR, 1.0),))
            for i in range(20)]
    return Snapshot(nodes, leases), head, tail


def _plan_counting_repeats(snapshot: Snapshot, tasks: list[QueuedTask], policy: Policy) -> tuple[Plan, list[bool]]:
    """The cycle's plan (walked over a list), and whether each `_repeat_failure` call repeated a remembered failure."""
    repeated = []

    class Counting(Cycle):
        def _repeat_failure(self, task, options, shape):
            done = super()._repeat_failure(task, options, shape)
            repeated.append(done)
            return done

    ordered = order_queue(tasks, policy, NOW)
    assert ordered[0] is tasks[0]
    cycle = Counting(snapshot, policy, NOW, ordered)
    cycle.walk(ordered)
    return cycle.to_plan(), repeated


def test_the_shortcut_is_taken_behind_a_reservation() -> None:
    """The equality above is not vacuous: tasks of one shape behind the reservation repeat a failure,
    each told its own runtime."""
    snapshot, head, tail = _behind_a_reservation(PriorityClass.STANDARD, NOW)
    policy = replace(POLICIES["cardflow"], headroom=0.0)
    fast, repeated = _plan_counting_repeats(snapshot, [head, *tail], policy)
    assert sum(repeated) == 19
    assert {d.reason for d in fast.deferrals[1:]} == {DeferralReason.BEHIND_RESERVATION}
    assert len({d.detail for d in fast.deferrals[1:]}) == 20
    assert fast.deferrals == straight_plan(snapshot, [head, *tail], policy, NOW).deferrals


def test_core_tasks_past_their_grace_repeat_a_failure_too() -> None:
    """Core tasks that may preempt but find nothing to preempt behind the reservation repeat a failure
    like any other shape (their attempt would fail alike: no preemption changed their card types), each
    told its own runtime — and decide exactly as attempting each one."""
    snapshot, head, tail = _behind_a_reservation(PriorityClass.CORE, NOW - 2 * HOUR)
    policy = replace(POLICIES["cardflow"], headroom=0.0)
    fast, repeated = _plan_counting_repeats(snapshot, [head, *tail], policy)
    assert sum(repeated) == 19
    assert {d.reason for d in fast.deferrals[1:]} == {DeferralReason.BEHIND_RESERVATION}
    assert fast == straight_plan(snapshot, [head, *tail], policy, NOW)


def _a_later_task_like_a_failed_one(differs_in: str) -> tuple[Snapshot, list[QueuedTask], Policy]:
    """A head task holding the reservation on two half-busy H100 nodes, a 2-GPU task that fails behind
    it, then one of the same GPUs, heaviness and card types that differs only in `differs_in` and starts."""
    nodes = (*(Node(f"n{i}", "H100", 8, frozenset(range(4))) for i in range(2)), Node("a0", "A10", 8, frozenset(range(3))))
    leases = (*(RunningLease(f"L{i}", f"run{i}", "p", PriorityClass.STANDARD, f"n{i}", "H100", (4, 5, 6, 7),
                             NOW - HOUR, NOW + HOUR) for i in range(2)),
              RunningLease("LA", "runA", "p", PriorityClass.CORE, "a0", "A10", (3, 4, 5, 6, 7), NOW - HOUR, NOW + HOUR))
    head = QueuedTask("head", "p", PriorityClass.STANDARD, 9, 16, NOW - 2 * HOUR, (CardOption("H100", HOUR, 1.0),))
    policy = replace(POLICIES["cardflow"], headroom=0.25)  # A10: 2 of 8 GPUs kept for core work

    def task(task_id: str, klass: PriorityClass, card: str, runtime_s: float, checkpoint: float | None = None):
        return QueuedTask(task_id, "p", klass, 1, 2, NOW, (CardOption(card, runtime_s, 1.0),),
                          checkpoint_interval_s=checkpoint)

    pairs = {  # (the failing task, the one like it that starts)
        "its end before the reservation's start": (task("x1", PriorityClass.STANDARD, "H100", 5 * HOUR),
                                                   task("x2", PriorityClass.STANDARD, "H100", 0.5 * HOUR)),
        "its return within the preemption grace": (task("x1", PriorityClass.STANDARD, "A10", 5 * HOUR),
                                                   task("x2", PriorityClass.STANDARD, "A10", 300.0)),
        "its class": (task("x1", PriorityClass.STANDARD, "A10", 5 * HOUR),
                      task("x2", PriorityClass.OPPORTUNISTIC, "A10", 5 * HOUR)),
        "its checkpoints": (task("x1", PriorityClass.OPPORTUNISTIC, "H100", 5 * HOUR),
                            task("x2", PriorityClass.OPPORTUNISTIC, "H100", 5 * HOUR, checkpoint=1800.0)),
    }
    return Snapshot(nodes, leases), [head, *pairs[differs_in]], policy


@pytest.mark.parametrize("differs_in", ["its end before the reservation's start", "its return within the preemption grace",
                                        "its class", "its checkpoints"])
def test_over_a_kept_queue_a_task_unlike_a_failed_one_of_its_shape_is_attempted(differs_in: str) -> None:
    """The settled walk over a kept queue remembers a failure by more than the queue's shape number
    (`Cycle._walk_shape`): a later task that differs in what its attempt reads is attempted, and starts."""
    snapshot, queue, policy = _a_later_task_like_a_failed_one(differs_in)
    fast = plan(snapshot, OrderedQueue.of(queue, policy), policy, NOW)
    assert [grant.task_id for grant in fast.grants] == ["x2"]
    assert fast.deferrals.task_ids == ("head", "x1")
    assert fast == straight_plan(snapshot, queue, policy, NOW)


@pytest.mark.parametrize("differs_in", ["its end before the reservation's start", "its return within the preemption grace",
                                        "its class", "its checkpoints"])
def test_over_a_list_a_task_unlike_a_failed_one_of_its_shape_is_attempted(differs_in: str) -> None:
    """The same over a list (`Cycle._walk_settled_tasks`, failures remembered by `Cycle._shape`)."""
    snapshot, queue, policy = _a_later_task_like_a_failed_one(differs_in)
    fast = plan(snapshot, queue, policy, NOW)
    assert [grant.task_id for grant in fast.grants] == ["x2"]
    assert fast.deferrals.task_ids == ("head", "x1")
    assert fast == straight_plan(snapshot, queue, policy, NOW)


def test_a_queue_kept_for_another_grace_tells_returns_within_the_grace_of_the_policy_planned_with() -> None:
    """The kept queue's `grace_bits` are for the grace it was made with; planned with another policy's,
    they are worked out afresh: here both tasks return within the queue's grace, only x2 within the plan's."""
    snapshot, queue, policy = _a_later_task_like_a_failed_one("its return within the preemption grace")
    fast = plan(snapshot, OrderedQueue.of(queue, replace(policy, preempt_after_s=10 * HOUR)), policy, NOW)
    assert [grant.task_id for grant in fast.grants] == ["x2"]
    assert fast == straight_plan(snapshot, queue, policy, NOW)


def test_a_preemption_changes_what_a_remembered_failure_on_its_card_type_said() -> None:
    """fifo: a standard task fails for the headroom on A10 (an opportunistic lease there covers part of
    it), then a core task preempts that lease, then a task of the first one's shape fails for the headroom
    too — with fewer GPUs covered: the preemption counts as a change on A10 (`Cycle._changed_on`), so the
    first failure is not repeated, over a list as over a kept queue."""
    nodes = (*(Node(f"n{i}", "H100", 8, frozenset(range(4))) for i in range(2)),
             Node("a0", "A10", 8, frozenset(range(3))), Node("a1", "A10", 8, frozenset(range(2))))
    leases = (*(RunningLease(f"L{i}", f"run{i}", "p", PriorityClass.STANDARD, f"n{i}", "H100", (4, 5, 6, 7),
                             NOW - HOUR, NOW + HOUR) for i in range(2)),
              RunningLease("opp", "run-opp", "p", PriorityClass.OPPORTUNISTIC, "a0", "A10", (3, 4), NOW - HOUR,
                           NOW + HOUR, last_checkpoint_at=NOW - 60.0),
              RunningLease("core", "run-core", "p", PriorityClass.CORE, "a0", "A10", (5, 6, 7), NOW - HOUR, NOW + HOUR),
              RunningLease("std", "run-std", "p", PriorityClass.STANDARD, "a1", "A10", (2, 3, 4, 5, 6, 7), NOW - HOUR,
                           NOW + HOUR))
    policy = replace(POLICIES["cardflow"], order="fifo", head_of_line_blocking=False, headroom=0.375)  # A10: 6 GPUs
    a10 = (CardOption("A10", 5 * HOUR, 1.0),)
    queue = [QueuedTask("head", "p", PriorityClass.STANDARD, 0, 16, NOW - 4 * HOUR, (CardOption("H100", HOUR, 1.0),)),
             QueuedTask("x1", "p", PriorityClass.STANDARD, 0, 2, NOW - 3 * HOUR, a10),
             QueuedTask("c", "p", PriorityClass.CORE, 0, 5, NOW - 2 * HOUR, a10),
             QueuedTask("x2", "p", PriorityClass.STANDARD, 0, 2, NOW - HOUR, a10)]
    listed, kept = plan(Snapshot(nodes, leases), queue, policy, NOW), plan(Snapshot(nodes, leases), OrderedQueue.of(queue, policy), policy, NOW)
    assert [preemption.lease_id for preemption in listed.preemptions] == ["opp"]
    by_id = {deferral.task_id: deferral for deferral in listed.deferrals}
    assert by_id["x1"].reason == by_id["x2"].reason == DeferralReason.HEADROOM
    assert by_id["x1"].detail != by_id["x2"].detail
    assert listed == kept == straight_plan(Snapshot(nodes, leases), queue, policy, NOW)


quota_accounts = st.dictionaries(st.sampled_from(("a1", "a2", "a3", "p0")), st.builds(
    lambda project, hours, start, length, card: QuotaAccount(project, hours, NOW + start, NOW + start + length, card),
    st.sampled_from(("p0", "p1")), st.sampled_from((0.0, 1.0, 5.0, 50.0)), st.sampled_from((-10 * HOUR, 0.0, 60.0)),
    st.sampled_from((30.0, HOUR, 3 * HOUR, 30 * HOUR)), st.none() | st.sampled_from(CARDS)), max_size=3)
quota_tasks = st.builds(
    lambda index, project, gpus, runtimes: QueuedTask(
        f"t{index}", project, PriorityClass.STANDARD, 0, gpus, NOW,
        tuple(CardOption(card, runtime, 1.0) for card, runtime in runtimes.items())),
    st.integers(0, 99), st.sampled_from(("p0", "p1", "p2")), st.sampled_from((1, 2, 8)),
    st.dictionaries(st.sampled_from(CARDS), st.sampled_from((60.0, 0.5 * HOUR, 2 * HOUR, 20 * HOUR)), max_size=3))


@settings(max_examples=300)
@given(accounts=quota_accounts, tasks=st.lists(st.tuples(quota_tasks, st.booleans()), max_size=12),
       margin=st.sampled_from((0.0, HOUR)), gate=st.booleans())
def test_allowing_every_option_is_what_the_usable_options_say(accounts, tasks, margin, gate) -> None:
    """`QuotaBook.allows_every_option` (two bounds per card type, kept until a charge) is True exactly when
    `usable_options` returns every option, between charges of granted tasks; `allows_longest` (the task's
    longest runtime against the tightest bounds of its card types, kept per shape) only when it is; and
    `usable_indexes` (from the task's columns) says what `usable_options` says."""
    policy = replace(POLICIES["cardflow"], quota_expiry_margin_s=margin, quota_expiry_gate=gate)
    book, fresh = QuotaBook(accounts, policy, NOW), FreshQuotaBook(accounts, policy, NOW)
    shape_keys: dict[tuple, int] = {}
    for task, granted in tasks:
        usable, failure = fresh.usable_options(task)
        allowed = failure is None and len(usable) == len(task.options)
        assert book.allows_every_option(task) == allowed
        cards = tuple(option.card_type for option in task.options)
        key = shape_keys.setdefault(cards, len(shape_keys))
        if book.allows_longest(task.project, key, cards, task.gpus, longest_runtime(task)):  # only if allowed
            assert allowed
        indexes, said = book.usable_indexes(task.project, cards, task.gpus, [option.runtime_s for option in task.options])
        assert ([task.options[index] for index in indexes], said) == (list(usable), failure)
        if granted and usable:
            book.charge(task, usable[0])
            fresh.charge(task, usable[0])


# Few shapes and small budgets: a shape refused, a grant of its project, then the shape again.
refusal_tasks = st.builds(
    lambda index, project, gpus, cards, runtime: QueuedTask(
        f"t{index}", project, PriorityClass.STANDARD, 0, gpus, NOW,
        tuple(CardOption(card, runtime * (1 + position), 1.0) for position, card in enumerate(cards))),
    st.integers(0, 99), st.sampled_from(("p0", "p1")), st.sampled_from((1, 4)),
    st.sampled_from((("H100",), ("A10", "H100"))), st.sampled_from((0.5 * HOUR, 2 * HOUR, 20 * HOUR)))


@settings(max_examples=400)
@given(accounts=quota_accounts, tasks=st.lists(st.tuples(quota_tasks | refusal_tasks, st.booleans()), max_size=20),
       margin=st.sampled_from((0.0, HOUR)), gate=st.booleans())
def test_a_kept_refusal_says_what_the_quota_says_until_the_project_is_charged(accounts, tasks, margin, gate) -> None:
    """`QuotaBook.refusals` (what refused every option of a task, kept per project and (GPUs, card types) until
    the project's next charge) tells a later task of that shape what `usable_options` of a book that works every
    standing out afresh tells it — the reason and the sentence, with the task's own need and the hours left after
    every charge — or nothing (None) when the quota allows one of its options."""
    policy = replace(POLICIES["cardflow"], quota_expiry_margin_s=margin, quota_expiry_gate=gate)
    book, fresh = QuotaBook(accounts, policy, NOW), FreshQuotaBook(accounts, policy, NOW)
    for task, granted in tasks:
        usable, failure = fresh.usable_options(task)
        cards, runtimes = tuple(option.card_type for option in task.options), [option.runtime_s for option in task.options]
        refusal = book.refusals.get(task.project, {}).get((task.gpus, cards))
        if refusal is not None:
            said = refusal.of(runtimes)
            assert said == failure if said is not None else failure is None
        indexes, said = book.usable_indexes(task.project, cards, task.gpus, runtimes, (task.gpus, cards))
        assert ([task.options[index] for index in indexes], said) == (list(usable), failure)
        if granted and usable:
            book.charge(task, usable[0])
            fresh.charge(task, usable[0])


def test_a_kept_refusal_is_dropped_when_its_project_is_charged() -> None:
    """After a charge a task of a refused shape is told the hours left after it, not those before."""
    policy = replace(POLICIES["cardflow"], quota_expiry_margin_s=0.0)
    book = QuotaBook({"p0": QuotaAccount("p0", 10.0, NOW - HOUR, NOW + 100 * HOUR)}, policy, NOW)
    small = QueuedTask("small", "p0", PriorityClass.STANDARD, 0, 2, NOW, (CardOption("H100", HOUR, 1.0),))
    assert book.usable_indexes("p0", ("A10",), 4, [4 * HOUR], "shape")[1] == (
        DeferralReason.QUOTA_EXHAUSTED, "needs 16.0 GPU-hours on A10; project p0 has 10.0 GPU-hours of quota left")
    assert book.refusals["p0"]["shape"].of([3 * HOUR]) == (
        DeferralReason.QUOTA_EXHAUSTED, "needs 12.0 GPU-hours on A10; project p0 has 10.0 GPU-hours of quota left")
    assert book.refusals["p0"]["shape"].of([2 * HOUR]) is None  # 8 GPU-hours: allowed
    book.charge(small, small.options[0])  # 2 GPU-hours
    assert "p0" not in book.refusals
    assert book.usable_indexes("p0", ("A10",), 4, [2 * HOUR], "shape")[1] is None  # 8 of the 8 left: allowed


def test_the_longest_runtime_decides_for_a_project_whose_bounds_are_alike_on_every_card_type() -> None:
    """One account for every card type: the quota allows all options exactly when it allows the longest
    runtime, so `allows_longest` says True then (and False once a charge leaves too little), without the task."""
    policy = replace(POLICIES["cardflow"], quota_expiry_margin_s=0.0)
    book = QuotaBook({"p0": QuotaAccount("p0", 10.0, NOW - HOUR, NOW + 100 * HOUR)}, policy, NOW)
    task = QueuedTask("t", "p0", PriorityClass.STANDARD, 0, 2, NOW, (CardOption("H100", HOUR, 1.0), CardOption("A10", 4 * HOUR, 1.0)))
    assert book.allows_longest("p0", 0, ("H100", "A10"), 2, 4 * HOUR) and book.allows_every_option(task)
    book.charge(task, task.options[0])  # 2 GPU-hours: 8 left, the A10 option needs 8
    assert book.allows_longest("p0", 0, ("H100", "A10"), 2, 4 * HOUR)
    book.charge(task, task.options[0])  # 6 left
    assert not book.allows_longest("p0", 0, ("H100", "A10"), 2, 4 * HOUR) and not book.allows_every_option(task)


def test_a_refusal_after_a_charge_says_the_hours_left_after_it() -> None:
    """The account's half of an "exhausted" sentence is kept (`QuotaBook._left_texts`) only while its hours left
    stand: after a charge, a refused task is told the new amount."""
    policy = replace(POLICIES["cardflow"], quota_expiry_margin_s=0.0)
    book = QuotaBook({"p0": QuotaAccount("p0", 10.0, NOW - HOUR, NOW + 100 * HOUR)}, policy, NOW)
    small = QueuedTask("small", "p0", PriorityClass.STANDARD, 0, 2, NOW, (CardOption("H100", HOUR, 1.0),))
    assert book.usable_indexes("p0", ("A10",), 4, [4 * HOUR])[1] == (
        DeferralReason.QUOTA_EXHAUSTED, "needs 16.0 GPU-hours on A10; project p0 has 10.0 GPU-hours of quota left")
    book.charge(small, small.options[0])  # 2 GPU-hours
    assert book.usable_indexes("p0", ("A10",), 4, [4 * HOUR])[1] == (
        DeferralReason.QUOTA_EXHAUSTED, "needs 16.0 GPU-hours on A10; project p0 has 8.0 GPU-hours of quota left")


finite = st.floats(-1e7, 1e7, allow_nan=False)


@settings(max_examples=1000)
@given(left_s=finite | st.sampled_from((inf, -inf)), left_gpu_hours=finite | st.sampled_from((inf, -inf)),
       gpus=st.integers(0, 64), margin=st.sampled_from((0.0, HOUR, 0.1)), beyond=st.floats(0.0, 1e6))
def test_from_the_runtime_a_refusal_starts_at_every_longer_runtime_is_refused(left_s, left_gpu_hours, gpus, margin,
                                                                              beyond) -> None:
    """`refused_from` (what `StandingRefusal.of` compares each runtime with before any arithmetic) is a runtime
    that the bounds' own test refuses — its computed crossing is often one float short, which the test does not
    refuse — and so is every longer one (the test is monotone in the runtime)."""
    def refused(runtime_s: float) -> bool:
        return left_s < runtime_s + margin or left_gpu_hours < gpus * runtime_s / HOUR

    start = refused_from(left_s, left_gpu_hours, gpus, margin)
    if start == inf:
        return  # nothing found: `of` asks the bounds
    assert refused(start)
    assert refused(start + beyond)
    assert refused(nextafter(start, inf))


bound = finite | st.sampled_from((inf, -inf))
runtime = st.floats(0.0, 1e7) | st.sampled_from((0.0, HOUR, float("nan")))


@settings(max_examples=1000)
@given(options=st.lists(st.tuples(st.tuples(bound, bound), runtime), min_size=1, max_size=5),
       gpus=st.integers(1, 64), margin=st.sampled_from((0.0, HOUR, 0.1)))
def test_a_kept_refusal_refuses_exactly_when_no_option_passes_its_bounds(options, gpus, margin) -> None:
    """`StandingRefusal.of` (its runtimes compared with each option's `refused_from`, written out for up to three
    options) refuses a task exactly when the bounds' own test refuses every option, for one to five options —
    some runtimes refused from their `refused_from`, some only by the bounds, some (not a number) by neither."""
    bounds = tuple(option_bounds for option_bounds, _ in options)
    runtimes = [runtime_s for _, runtime_s in options]
    refusal = StandingRefusal(bounds, gpus, "H100", margin, True)
    refusal.soonest_left_s = inf  # the sentence names the need (the account's expiry is not what refuses)

    def allowed(left_s: float, left_gpu_hours: float, runtime_s: float) -> bool:
        return not (left_s < runtime_s + margin or left_gpu_hours < gpus * runtime_s / HOUR)

    assert (refusal.of(runtimes) is None) == any(allowed(*option_bounds, runtime_s)
                                                 for option_bounds, runtime_s in options)


@pytest.mark.parametrize("left_gpu_hours, gpus", [(0.1, 3), (2.505070314848129, 1), (7.3, 7), (1e-3, 16)])
def test_the_crossing_as_computed_is_not_always_refused(left_gpu_hours, gpus) -> None:
    """Where `left_gpu_hours * 3600 / gpus` rounds so that its own need is not above what is left, `refused_from`
    returns a longer runtime that is (the first float up that the test refuses)."""
    crossing = left_gpu_hours * HOUR / gpus
    start = refused_from(inf, left_gpu_hours, gpus, 0.0)
    assert left_gpu_hours < gpus * start / HOUR
    assert start == crossing or not left_gpu_hours < gpus * crossing / HOUR


@pytest.mark.parametrize("need", [0.0, 0.04999, 0.05, 0.25, 1.0 / 3, 12.349999, 12.35, 2.5e6, 1e-300])
@pytest.mark.parametrize("account", ["project p0", "account a1 of project 100%-team (H100 only)"])
def test_the_exhausted_sentence_around_the_need_says_what_the_sentence_says(need, account) -> None:
    """A kept refusal's sentence (the need formatted between `quota_exhausted_around`'s parts) is the one
    `quota_need` + `quota_left` say, for any need."""
    left = reasons.quota_left(account, 3.25)
    before, after = reasons.quota_exhausted_around("H100", left)
    assert f"{before}{need:.1f}{after}" == reasons.quota_need("H100", need) + left


def test_a_cycle_keeps_its_working_state_in_slots() -> None:
    """`Cycle` declares every attribute of its working state as a slot and its mixins declare none, so a cycle has
    no instance dict (its attribute reads are slot reads: −3.8% instructions per first plan at scale). A mixin
    without `__slots__ = ()` would bring the dict back."""
    cycle = Cycle(Snapshot(()), POLICIES["cardflow"], 0.0)
    assert not hasattr(cycle, "__dict__")
