"""`OpportunisticScan` (pure): the lazy answer equals the narrowest ready opportunistic task over the whole queue
(on the card types its quota allows), and it reads the queue only as far as the question needs."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from shared.scheduling.model import CardOption, PriorityClass, QueuedTask, QuotaAccount
from shared.scheduling.opportunistic_scan import OpportunisticScan, passes_readiness
from shared.scheduling.policies import POLICIES
from shared.scheduling.ordered_queue import OrderedQueue
from shared.scheduling.queue_columns import WalkColumns
from shared.scheduling.quota import QuotaBook

CARDS = ("A10", "L40S", "H100")
PROJECTS = ("p0", "p1", "p2")
DAY = 86_400.0


def queued(n: int, priority_class: PriorityClass, gpus: int, cards: tuple[str, ...], *, data_ready: bool = True,
           approved: bool = True) -> QueuedTask:
    return QueuedTask(task_id=f"t{n}", project="p", priority_class=priority_class, priority=0, gpus=gpus,
                      submitted_at=0.0, options=tuple(CardOption(card, 3600.0, 1.0) for card in cards),
                      data_ready=data_ready, approved=approved)  # fmt: skip


def whole_queue_answer(queue: list[QueuedTask], gate: bool, card_type: str, free: int,
                       quota: QuotaBook | None = None) -> bool:
    """The narrowest over every ready opportunistic task (on the card types its quota allows), then one comparison."""
    def options(task: QueuedTask) -> tuple[CardOption, ...]:
        return quota.usable_options(task)[0] if quota is not None and task.project in quota.projects else task.options

    widths = [task.gpus for task in queue if task.priority_class == PriorityClass.OPPORTUNISTIC
              and passes_readiness(task, gate) and any(option.card_type == card_type for option in options(task))]
    return min(widths, default=free + 1) <= free


tasks = st.builds(
    lambda n, project, cls, gpus, cards, ready, approved: replace(
        queued(n, cls, gpus, tuple(cards), data_ready=ready, approved=approved), project=project),
    st.integers(0, 10**6), st.sampled_from(PROJECTS), st.sampled_from(list(PriorityClass)), st.integers(1, 16),
    st.lists(st.sampled_from(CARDS), max_size=3, unique=True), st.booleans(), st.booleans(),
)
accounts = st.lists(st.builds(
    lambda project, card, hours: QuotaAccount(project, hours, -DAY, DAY, card_type=card),
    st.sampled_from(PROJECTS[:2]), st.none() | st.sampled_from(CARDS), st.sampled_from([0.5, 3.0, 100.0]),
), max_size=4)


@given(st.lists(tasks, max_size=40), st.booleans(),
       st.lists(st.tuples(st.sampled_from(CARDS), st.integers(0, 16)), min_size=1, max_size=6), accounts)
def test_each_answer_equals_the_whole_queue_read_at_once(queue: list[QueuedTask], gate: bool,
                                                         questions: list[tuple[str, int]],
                                                         quota_accounts: list[QuotaAccount]) -> None:
    """With and without a quota book (tasks of 3 projects, accounts on 2 of them: some options refused, some not)."""
    def book() -> QuotaBook:
        return QuotaBook({f"a{n}": account for n, account in enumerate(quota_accounts)}, POLICIES["cardflow"], 0.0)

    plain, with_quota, judge = OpportunisticScan(queue, gate), OpportunisticScan(queue, gate, book()), book()
    for card_type, free in questions:  # one scan answers every question of a cycle, in any order
        assert plain.waits_for(card_type, free) == whole_queue_answer(queue, gate, card_type, free)
        assert with_quota.waits_for(card_type, free) == whole_queue_answer(queue, gate, card_type, free, judge)


def test_it_stops_at_the_first_task_that_settles_the_question() -> None:
    read: list[str] = []

    def reading(queue: list[QueuedTask]):
        for task in queue:
            read.append(task.task_id)
            yield task

    queue = [queued(0, PriorityClass.STANDARD, 1, ("L40S",)),
             queued(1, PriorityClass.OPPORTUNISTIC, 1, ("L40S",), data_ready=False),  # not ready under the gate
             queued(2, PriorityClass.OPPORTUNISTIC, 2, ("L40S",)),
             queued(3, PriorityClass.OPPORTUNISTIC, 1, ("L40S", "H100")),
             *[queued(n, PriorityClass.OPPORTUNISTIC, 1, ("A10",)) for n in range(4, 1000)]]
    scan = OpportunisticScan(reading(queue), gate=True)
    assert scan.waits_for("L40S", 1) and read == ["t0", "t1", "t2", "t3"]
    assert scan.waits_for("H100", 1) and scan.waits_for("L40S", 2) and len(read) == 4  # already read: no more
    assert scan.waits_for("A10", 1) and len(read) == 5
    assert not scan.waits_for("H100", 0) and len(read) == 1000  # no task fits 0 GPUs: the whole queue is read


class ReadCounting(list):
    """A list that records which positions were read by index."""

    def __init__(self, tasks: list[QueuedTask]) -> None:
        super().__init__(tasks)
        self.read: list[int] = []

    def __getitem__(self, index):
        self.read.append(index)
        return super().__getitem__(index)


def kept_columns(queue: list[QueuedTask]) -> tuple[list[QueuedTask], WalkColumns]:
    """The tasks (unique ids) as a kept queue orders them, and its walk columns in that order."""
    policy = POLICIES["cardflow"]
    kept = OrderedQueue.of(queue, policy)
    return list(kept), kept.walk_columns(None, policy.preempt_after_s)


@given(st.lists(tasks, max_size=40, unique_by=lambda task: task.task_id), st.booleans(),
       st.lists(st.tuples(st.sampled_from(CARDS), st.integers(0, 16)), min_size=1, max_size=6), accounts)
def test_with_the_kept_columns_it_answers_alike_and_reads_only_ready_opportunistic_tasks(
        queue: list[QueuedTask], gate: bool, questions: list[tuple[str, int]],
        quota_accounts: list[QuotaAccount]) -> None:
    """Given the kept queue's columns the scan jumps to the ready opportunistic tasks and past the shapes that narrow
    nothing any more: the same answers as reading every task (with a quota book too), and no other task read."""
    def book() -> QuotaBook:
        return QuotaBook({f"a{n}": account for n, account in enumerate(quota_accounts)}, POLICIES["cardflow"], 0.0)

    ordered, columns = kept_columns(queue)
    counting = ReadCounting(ordered)
    plain, jumping = OpportunisticScan(ordered, gate, book()), OpportunisticScan(counting, gate, book(), columns)
    for card_type, free in questions:
        assert jumping.waits_for(card_type, free) == plain.waits_for(card_type, free)
    assert all(ordered[at].priority_class == PriorityClass.OPPORTUNISTIC and passes_readiness(ordered[at], gate)
               for at in counting.read)


def test_with_the_kept_columns_a_queue_without_opportunistic_work_is_not_read() -> None:
    ordered, columns = kept_columns([queued(n, PriorityClass.STANDARD, 1, ("L40S",)) for n in range(1000)])
    counting = ReadCounting(ordered)
    assert not OpportunisticScan(counting, gate=True, columns=columns).waits_for("L40S", 8) and counting.read == []


def test_with_the_kept_columns_it_reads_one_task_of_a_shape_too_wide_for_the_question() -> None:
    """A thousand ready opportunistic tasks of 16 GPUs on L40S, asked about 1 free L40S GPU: the first one read makes
    16 the narrowest, and every later one of its GPUs and card types is passed by, unread."""
    ordered, columns = kept_columns([queued(n, PriorityClass.OPPORTUNISTIC, 16, ("L40S",)) for n in range(1000)])
    counting = ReadCounting(ordered)
    scan = OpportunisticScan(counting, gate=True, columns=columns)
    assert not scan.waits_for("L40S", 1) and len(counting.read) == 2  # the first sets 16, the second is found spent
    assert scan.waits_for("L40S", 16)
