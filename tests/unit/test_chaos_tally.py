"""`bench/chaos_tally.py`: what counts as a task run twice in a chaos run, and what is only a copy."""

from __future__ import annotations

import sys
from pathlib import Path

from shared.events import Envelope, make_event
from tests.helpers.task_events import TaskStory

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.chaos_tally import story_of, tally_runs  # noqa: E402


def finish_report(story: TaskStory, exit_code: int | None = 0, error: str | None = None) -> Envelope:
    """The agent's `report.finished` for the story's current lease."""
    data = {"agent_id": "agent-n1", "lease_id": story.lease_id, "task_id": story.task_id,
            "fencing_token": int(story.lease_id.rsplit("L", 1)[1]), "exit_code": exit_code, "error": error}
    return make_event("report.finished", subject="agent/agent-n1", subject_seq=1, producer="agent/agent-n1",
                      actor="agent:agent-n1", data=data, occurred_at=story.clock)


def one_clean_run(task_id: str = "T1") -> tuple[TaskStory, list[Envelope], list[Envelope]]:
    story = TaskStory(task_id)
    events = [story.submitted(name="chaos-0001"), story.queued(), story.granted(), story.started()]
    reports = [finish_report(story)]
    events.append(story.succeeded())
    return story, events, reports


def test_one_clean_run_is_not_run_twice() -> None:
    _, events, reports = one_clean_run()
    counts = tally_runs(events, reports, {"chaos-0001"})
    assert counts.run_twice == ()
    assert counts.succeeded == {"T1"} and counts.ended == {"T1"}
    assert counts.delivered_twice == {}


def test_a_success_published_twice_by_the_relay_is_a_copy_not_a_second_run() -> None:
    # The outbox relay died after its XADD and before marking the row sent: the same event
    # (same event id) is on cf:events twice. Consumers de-duplicate it; so does the count.
    _, events, reports = one_clean_run()
    success = events[-1]
    grant = events[2]
    copies = [*events, success, grant]
    counts = tally_runs(copies, reports, {"chaos-0001"})
    assert counts.run_twice == ()
    assert counts.delivered_twice == {"task.succeeded": 1, "lease.granted": 1}


def test_two_distinct_successes_are_run_twice() -> None:
    story, events, reports = one_clean_run()
    events += [story.granted(), story.succeeded()]
    assert tally_runs(events, reports, {"chaos-0001"}).run_twice == ("T1",)


def test_a_finished_run_refused_after_its_lease_expired_and_run_again_is_run_twice() -> None:
    # The run finished, its report came after the lease had expired (refused: lease_ended), the
    # task was requeued and ran again to the end: one task.succeeded, but the work was done twice.
    story = TaskStory("T1")
    events = [story.submitted(name="chaos-0001"), story.queued(), story.granted(), story.started()]
    reports = [finish_report(story)]
    events += [story.requeued(reason="lease_expired"), story.granted(), story.started()]
    reports.append(finish_report(story))
    events.append(story.succeeded())
    counts = tally_runs(events, reports, {"chaos-0001"})
    assert counts.run_twice == ("T1",)
    assert "agent finished T1-L1 exit 0" in story_of("T1", "chaos-0001", events, reports)


def test_a_run_stopped_on_request_then_resumed_is_one_run() -> None:
    # Preempted (the agent checkpointed and stopped with exit 0 on request), resumed elsewhere.
    story = TaskStory("T1")
    events = [story.submitted(name="chaos-0001"), story.queued(), story.granted(), story.started()]
    reports = [finish_report(story, error="preempted: core work needs the GPUs")]
    events += [story.requeued(reason="preempted"), story.granted(), story.started()]
    reports.append(finish_report(story))
    events.append(story.succeeded())
    assert tally_runs(events, reports, {"chaos-0001"}).run_twice == ()


def test_a_lease_granted_after_the_success_is_run_twice() -> None:
    story, events, reports = one_clean_run()
    events.append(story.granted())
    assert tally_runs(events, reports, {"chaos-0001"}).run_twice == ("T1",)
