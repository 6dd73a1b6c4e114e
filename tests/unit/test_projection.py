"""Table tests of the task projection: what each event (and each combination of facets) shows."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from shared.events import make_event
from shared.events.states import TaskState
from shared.events.subjects import node_subject
from shared.projection import TASK_EVENT_TYPES, evolve, fold, replay_order, task_id_of
from shared.task_view import TaskView
from tests.helpers.task_events import TaskStory

S = TaskState
Steps = Callable[[TaskStory], list]


def view_after(steps: Steps, task_id: str = "T1") -> TaskView:
    story = TaskStory(task_id)
    view = None
    for event in steps(story):
        view = evolve(view, event)
    assert view is not None
    return view


LIFECYCLE: list[tuple[str, Steps, TaskState, str]] = [
    ("submitted only", lambda s: [s.submitted()], S.SUBMITTED, "awaiting_readiness"),
    ("inputs missing", lambda s: [s.submitted(), s.readiness(False)], S.WAITING_DATA, "data_not_ready"),
    ("ready, not matched", lambda s: [s.submitted(), s.readiness(True)], S.SUBMITTED, "awaiting_match"),
    ("ready and matched", lambda s: [s.submitted(), s.readiness(True), s.matched()], S.QUEUED, "awaiting_dispatch"),
    ("no card fits", lambda s: [s.submitted(), s.readiness(True), s.unmatchable()], S.UNMATCHABLE, "insufficient_vram"),
    ("queued", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.queued()], S.QUEUED, "queued"),
    ("held on quota", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.held()], S.HELD, "quota_exhausted"),
    ("waiting on capacity stays queued", lambda s: [s.submitted(), s.readiness(True), s.matched(),
                                                     s.held("no_capacity", "no free A100")], S.QUEUED, "no_capacity"),
    ("leased", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.queued(), s.granted()], S.LEASED, "leased"),
    ("running", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.queued(), s.granted(), s.started()],
     S.RUNNING, "running"),
    ("succeeded", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.granted(), s.started(), s.succeeded()],
     S.SUCCEEDED, "succeeded"),
    ("failed", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.granted(), s.started(), s.failed()],
     S.FAILED, "failed"),
    ("preempted", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.granted(), s.started(), s.requeued()],
     S.QUEUED, "preempted"),
    ("cancel requested", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.queued(), s.cancel_requested()],
     S.QUEUED, "cancel_requested"),
    ("cancelled", lambda s: [s.submitted(), s.queued(), s.cancel_requested(), s.cancelled()], S.CANCELLED, "cancelled"),
    ("rejected", lambda s: [s.rejected()], S.REJECTED, "rejected"),
    ("data lost while queued", lambda s: [s.submitted(), s.readiness(True), s.matched(), s.queued(), s.readiness(False)],
     S.WAITING_DATA, "data_not_ready"),
    ("data lost while running", lambda s: [s.submitted(), s.readiness(True), s.granted(), s.started(), s.readiness(False)],
     S.RUNNING, "running"),
    ("readiness before submission", lambda s: [s.readiness(False)], S.WAITING_DATA, "data_not_ready"),
    ("matched before readiness", lambda s: [s.matched(), s.submitted()], S.SUBMITTED, "awaiting_readiness"),
]


@pytest.mark.parametrize(("steps", "state", "reason"), [row[1:] for row in LIFECYCLE], ids=[row[0] for row in LIFECYCLE])
def test_state_and_reason_per_lifecycle_step(steps: Steps, state: TaskState, reason: str) -> None:
    view = view_after(steps)
    assert (view.state, view.reason) == (state, reason)
    assert view.reason_detail, "every state comes with a sentence"


def test_submission_fills_the_identity_fields() -> None:
    view = view_after(lambda s: [s.submitted(idempotency_key="run-42", name="eval-7", gpus=4)])
    assert (view.id, view.name, view.idempotency_key, view.project, view.gpus) == ("T1", "eval-7", "run-42", "proj-a", 4)
    assert view.priority_class == "standard" and view.priority == 5
    assert view.submitted_at is not None and view.submitted_by == "service:intake"


def test_missing_inputs_are_listed_with_the_ready_share() -> None:
    view = view_after(lambda s: [s.submitted(), s.readiness(False, ("s3://bucket-b/x", {"dataset": "d", "version": "2"}), 0.25)])
    assert view.missing_inputs == ("s3://bucket-b/x", "d@2")
    assert view.ready_fraction == 0.25
    assert "s3://bucket-b/x" in view.reason_detail and "d@2" in view.reason_detail and "25%" in view.reason_detail


def test_readiness_before_submission_keeps_a_partial_view_then_completes_it() -> None:
    story = TaskStory()
    partial = evolve(None, story.readiness(False))
    assert partial is not None and partial.name is None and partial.state is S.WAITING_DATA
    full = evolve(partial, story.submitted())
    assert full.name == "train-llm" and full.state is S.WAITING_DATA


def test_match_gives_card_and_estimate_and_the_lease_card_wins() -> None:
    matched = view_after(lambda s: [s.submitted(), s.readiness(True), s.matched("L40S", cost=7.0)])
    assert matched.card_type == "L40S" and matched.match is not None
    assert (matched.match.est_cost, matched.match.alternatives) == (7.0, 1)
    leased = view_after(lambda s: [s.submitted(), s.matched("L40S"), s.granted(node="n9", card="H100-X")])
    assert (leased.card_type, leased.node_id, leased.gpu_indices) == ("H100-X", "n9", (0, 1))


def test_held_shows_the_dispatchers_reason_verbatim() -> None:
    view = view_after(lambda s: [s.submitted(), s.readiness(True), s.matched(), s.held("quota_expires", "quota ends in 2 h")])
    assert view.reason_detail == "quota ends in 2 h"


def test_requeue_clears_the_lease_and_a_new_grant_counts_another_attempt() -> None:
    story = TaskStory()
    view = None
    for event in [story.submitted(), story.granted(), story.started(), story.checkpointed(0.4), story.requeued()]:
        view = evolve(view, event)
    assert (view.lease_id, view.node_id, view.attempts, view.progress) == (None, None, 1, 0.4)
    assert "resume from s3://ckpt/T1/0.5" in view.reason_detail
    view = evolve(view, story.granted(node="n2"))
    assert (view.attempts, view.node_id, view.state) == (2, "n2", S.LEASED)


def test_multi_node_grant_is_one_attempt() -> None:
    view = view_after(lambda s: [s.submitted(), s.granted(node="n1"), s.granted(node="n2")])
    assert view.attempts == 1


def test_terminal_run_records_times_progress_and_output() -> None:
    view = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.checkpointed(0.3), s.succeeded(42.0)])
    assert view.is_terminal and view.progress == 1.0 and view.output_units == 42.0
    assert view.started_at is not None and view.finished_at is not None and view.started_at < view.finished_at


def test_a_flagged_success_says_so_in_both_languages() -> None:
    from services.console.sentences import reason_sentence

    view = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.succeeded(
        None, ("implausibly_early_success", "output_out_of_bounds"), "after 20s of a 2h estimate", 1e9)])
    assert (view.state, view.reason, view.output_units) == (S.SUCCEEDED, "succeeded_flagged", None)
    assert view.flags == ("implausibly_early_success", "output_out_of_bounds")
    assert "flagged for review (implausibly_early_success, output_out_of_bounds): after 20s" in view.reason_detail
    assert reason_sentence(view, "zh") == "已完成，但成功报告被标记待复核（成功过早（待复核）、产出超出上限（不计入）），产出不计入统计"


def test_a_cleared_flag_makes_an_ordinary_success_that_says_who_cleared_it() -> None:
    view = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.succeeded(
        400.0, ("implausibly_early_success",), "after 20s of a 2h estimate"), s.flag_cleared("checked the samples")])
    assert (view.state, view.reason, view.flags, view.output_units) == (S.SUCCEEDED, "succeeded", (), 400.0)
    assert view.reason_detail.endswith("flagged (implausibly_early_success), then cleared by service:intake after"
                                       " checking the output: checked the samples")
    unflagged = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.succeeded(7.0), s.flag_cleared()])
    assert (unflagged.reason, unflagged.reason_detail) == ("succeeded", "finished successfully; output 7 units")


def test_failure_sentence_names_the_error_and_exit_code() -> None:
    view = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.failed("segfault", 139)])
    assert view.reason_detail == "segfault (exit code 139)"


def test_dispatcher_events_after_the_end_change_nothing_but_bookkeeping() -> None:
    story = TaskStory()
    done = fold([story.submitted(), story.granted(), story.started(), story.succeeded()])["T1"]
    after = evolve(done, story.queued())
    assert (after.state, after.reason, after.progress) == (done.state, done.reason, done.progress)


def test_cancel_request_after_the_end_is_not_shown_as_pending() -> None:
    view = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.succeeded(), s.cancel_requested("late")])
    assert (view.state, view.reason) == (S.SUCCEEDED, "succeeded")


def test_rejection_lists_every_problem() -> None:
    view = view_after(lambda s: [s.rejected(("gpus", 0, "expected a number >= 1"), ("profile", "x", "expected compute"))])
    assert [p.field for p in view.problems] == ["gpus", "profile"]
    assert "gpus: expected a number >= 1" in view.reason_detail and "profile" in view.reason_detail
    assert view.finished_at is not None


def test_usage_accumulates_cost_and_gpu_hours() -> None:
    view = view_after(lambda s: [s.submitted(), s.granted(), s.usage(3600.0, 2.0), s.usage(1800.0, 1.0)])
    assert (view.used_gpu_hours, view.used_cost) == (1.5, 3.0)


def test_duplicates_and_older_events_of_the_same_owner_change_nothing() -> None:
    story = TaskStory()
    first, second = story.submitted(), story.cancel_requested()
    view = evolve(evolve(None, first), second)
    assert evolve(view, second) is view
    assert evolve(view, first) is view
    assert view.events == 2 and view.seqs == {"intake:task/T1": 2}


def test_events_not_about_a_task_are_ignored() -> None:
    node = make_event(
        "node.registered", subject=node_subject("n1"), subject_seq=1, producer="dispatcher/x", actor="service:dispatcher",
        data={"node_id": "n1", "agent_id": "a1", "card_type": "A100", "gpus": 8, "mode": "sim"},
    )
    view = view_after(lambda s: [s.submitted()])
    assert task_id_of(node) is None
    assert evolve(None, node) is None and evolve(view, node) is view


def test_an_event_of_another_task_is_an_error() -> None:
    view = view_after(lambda s: [s.submitted()])
    with pytest.raises(ValueError, match="not T1"):
        evolve(view, TaskStory("T2").submitted())


def test_every_projected_type_is_a_catalogued_event_type() -> None:
    from shared.events import EVENT_TYPES

    assert TASK_EVENT_TYPES <= set(EVENT_TYPES)


def test_fold_keeps_one_view_per_task() -> None:
    a, b = TaskStory("A"), TaskStory("B")
    views = fold([a.submitted(), b.submitted(), b.readiness(False), a.readiness(True), a.matched()])
    assert {task: view.state for task, view in views.items()} == {"A": S.QUEUED, "B": S.WAITING_DATA}


def test_view_survives_a_json_round_trip() -> None:
    view = view_after(lambda s: [s.submitted(), s.readiness(True), s.matched(), s.granted(), s.started(), s.usage()])
    assert TaskView.model_validate_json(view.model_dump_json()) == view
    assert TaskView.model_validate(view.model_dump(mode="json")) == view


def test_replay_order_restores_each_owners_order_from_a_shuffled_archive() -> None:
    story = TaskStory()
    events = [story.submitted(), story.readiness(False), story.readiness(True), story.matched(), story.queued(),
              story.granted(), story.started(), story.checkpointed(0.5), story.succeeded(), story.usage()]
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    assert fold(replay_order(shuffled)) == fold(events)


KEPT_BY_A_CARRIED_TRANSITION = ("state", "reason", "project", "priority_class", "priority", "lease_id", "node_id",
                                "leased_card_type", "gpu_indices", "attempts", "output_units")


def test_a_transition_carried_by_the_next_event_leaves_the_view_its_own_event_would() -> None:
    def separate(s: TaskStory) -> list:
        return [s.submitted(), s.readiness(True), s.matched(), s.queued(), s.granted(), s.started(), s.succeeded()]

    def carried(s: TaskStory) -> list:
        return [s.submitted(), s.readiness(True), s.matched(), s.granted(queued=True), s.succeeded(started_on="n1")]

    alone, carried_view = view_after(separate), view_after(carried)
    assert [getattr(carried_view, f) for f in KEPT_BY_A_CARRIED_TRANSITION] == [
        getattr(alone, f) for f in KEPT_BY_A_CARRIED_TRANSITION]  # fmt: skip
    assert carried_view.started_at == carried_view.finished_at  # it started when its end was reported
    assert carried_view.reason_detail == "started on node n1 and finished successfully; output 1,000 units"
    assert alone.reason_detail == "finished successfully; output 1,000 units"


def test_a_failure_that_carries_its_start_leaves_the_view_a_started_run_would() -> None:
    alone = view_after(lambda s: [s.submitted(), s.granted(), s.started(), s.failed("boom", 3)])
    carried = view_after(lambda s: [s.submitted(), s.granted(), s.failed("boom", 3, started_on="n1")])
    kept = ("state", "reason", "lease_id", "node_id", "attempts")
    assert [getattr(carried, f) for f in kept] == [getattr(alone, f) for f in kept]
    assert carried.started_at == carried.finished_at  # it started when its end was reported
    assert carried.reason_detail == "started on node n1 and failed: boom (exit code 3)"
    assert alone.reason_detail == "boom (exit code 3)"


def test_a_grant_that_carries_the_queue_entry_records_it_like_task_queued() -> None:
    def carried(s: TaskStory) -> list:  # the dispatcher's facet alone: the entry is all it says of the project
        return [s.readiness(True), s.matched(), s.granted(queued=True)]

    def without(s: TaskStory) -> list:
        return [s.readiness(True), s.matched(), s.granted()]

    assert (view_after(carried).project, view_after(carried).priority) == ("proj-a", 5)
    assert (view_after(without).project, view_after(without).priority) == (None, None)
    assert view_after(carried).state is S.LEASED
