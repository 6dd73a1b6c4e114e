"""Table tests of the readiness board's grouping, the queue order and the pre-flight checklist (pure)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from services.console.blockers import BLOCKER_OF_REASON, BlockerKind, Check, blocker_of, group_board, preflight, queue_order
from shared.events.reasons import RequeueReason, UnmatchableReason
from shared.projection import evolve
from shared.task_view import TaskView, ViewReason
from shared.scheduling.model import DeferralReason
from tests.helpers.task_events import T0, TaskStory

K = BlockerKind
Steps = Callable[[TaskStory], list]


def view_of(steps: Steps, task_id: str = "T1", **submitted: object) -> TaskView:
    story = TaskStory(task_id)
    view = None
    for event in steps(story) if not submitted else [story.submitted(**submitted), *steps(story)[1:]]:
        view = evolve(view, event)
    assert view is not None
    return view


READY = lambda s: [s.submitted(), s.readiness(True), s.matched()]  # noqa: E731

CASES: list[tuple[str, Steps, BlockerKind]] = [
    ("not yet checked", lambda s: [s.submitted()], K.CHECKING),
    ("inputs missing", lambda s: [s.submitted(), s.readiness(False)], K.DATA),
    ("ready, awaiting the matcher", lambda s: [s.submitted(), s.readiness(True)], K.CHECKING),
    ("ready and matched", READY, K.RUNNABLE),
    ("queued", lambda s: [*READY(s), s.queued()], K.RUNNABLE),
    ("held on quota", lambda s: [*READY(s), s.held("quota_exhausted")], K.QUOTA),
    ("quota expires first", lambda s: [*READY(s), s.held("quota_expires", "expires")], K.QUOTA),
    ("not approved", lambda s: [*READY(s), s.held("not_approved", "needs approval")], K.APPROVAL),
    ("deadline", lambda s: [*READY(s), s.held("deadline_unreachable", "too late")], K.DEADLINE),
    ("no capacity", lambda s: [*READY(s), s.held("no_capacity", "no free A100")], K.CAPACITY),
    ("headroom", lambda s: [*READY(s), s.held("headroom", "kept free")], K.CAPACITY),
    ("reserved", lambda s: [*READY(s), s.held("reserved", "GPUs reserved")], K.RESERVATION),
    ("behind a reservation", lambda s: [*READY(s), s.held("behind_reservation", "would delay")], K.RESERVATION),
    ("operator", lambda s: [*READY(s), s.held("operator", "on hold")], K.OPERATOR),
    ("no card fits", lambda s: [s.submitted(), s.readiness(True), s.unmatchable()], K.NO_CARD),
    ("running", lambda s: [*READY(s), s.granted(), s.started()], K.RUNNING),
    ("preempted back to the queue", lambda s: [*READY(s), s.granted(), s.started(), s.requeued()], K.RUNNABLE),
    ("cancel requested", lambda s: [*READY(s), s.queued(), s.cancel_requested()], K.CANCELLING),
]


@pytest.mark.parametrize(("steps", "kind"), [(s, k) for _, s, k in CASES], ids=[c[0] for c in CASES])
def test_each_situation_lands_in_its_group(steps: Steps, kind: BlockerKind) -> None:
    assert blocker_of(view_of(steps)) is kind


def test_every_reason_an_open_task_can_show_has_a_group() -> None:
    terminal = {ViewReason.SUCCEEDED, ViewReason.SUCCEEDED_FLAGGED, ViewReason.FAILED, ViewReason.CANCELLED,
                ViewReason.REJECTED}
    reasons = {*ViewReason, *DeferralReason, *UnmatchableReason, *RequeueReason} - terminal
    assert {r.value for r in reasons} <= set(BLOCKER_OF_REASON)


def test_board_groups_counts_and_leaves_finished_tasks_out() -> None:
    views = [
        view_of(lambda s: [s.submitted(), s.readiness(False, ("s3://lake/a", {"dataset": "tokens", "version": "3"}))], "T-data"),
        view_of(lambda s: [*READY(s), s.held("quota_exhausted")], "T-quota"),
        view_of(lambda s: [*READY(s), s.granted(), s.started(), s.succeeded()], "T-done"),
        view_of(lambda s: [*READY(s), s.queued()], "T-runnable"),
    ]
    since = T0 - timedelta(hours=3)
    board = group_board(views, {"T-data": since})
    assert board.total == 3
    assert board.counts[K.DATA] == board.counts[K.QUOTA] == board.counts[K.RUNNABLE] == 1
    [entry] = board.groups[K.DATA]
    assert entry.waiting_since == since
    assert [(w.input, w.since) for w in entry.inputs] == [("s3://lake/a", since), ("tokens@3", since)]
    assert board.groups[K.QUOTA][0].inputs == ()


def test_groups_list_the_longest_waiting_first() -> None:
    views = [view_of(lambda s: [s.submitted(), s.readiness(False)], f"T{i}") for i in range(3)]
    since = {"T0": T0, "T1": T0 - timedelta(hours=1), "T2": T0 + timedelta(hours=1)}
    assert [e.view.id for e in group_board(views, since).groups[K.DATA]] == ["T1", "T0", "T2"]


def test_queue_order_puts_core_first_then_priority_then_submit_time() -> None:
    def queued(task_id: str, cls: str, priority: int, minutes: int) -> TaskView:
        story = TaskStory(task_id, start=T0 + timedelta(minutes=minutes))
        view = None
        for event in [story.submitted(priority_class=cls, priority=priority), story.readiness(True), story.matched(), story.queued()]:
            view = evolve(view, event)
        return view  # type: ignore[return-value]

    views = [queued("opp", "opportunistic", 90, 0), queued("std-low", "standard", 1, 0),
             queued("std-high", "standard", 50, 5), queued("core", "core", 0, 10),
             view_of(lambda s: [s.submitted(), s.readiness(False)], "waiting-data")]  # fmt: skip
    assert [v.id for v in queue_order(views, T0 + timedelta(minutes=20))] == ["core", "std-high", "std-low", "opp"]


def test_preflight_says_which_check_blocks() -> None:
    held = preflight(view_of(lambda s: [*READY(s), s.held("not_approved", "needs approval")]))
    assert held == {Check.DATA: True, Check.CARD: True, Check.APPROVAL: False, Check.QUOTA: True,
                    Check.DEADLINE: True, Check.GPUS: True}  # fmt: skip
    waiting = preflight(view_of(lambda s: [s.submitted(), s.readiness(False)]))
    assert waiting[Check.DATA] is False and waiting[Check.QUOTA] is None
    full = preflight(view_of(lambda s: [*READY(s), s.held("no_capacity", "no free A100")]))
    assert full[Check.GPUS] is False and full[Check.QUOTA] is True
