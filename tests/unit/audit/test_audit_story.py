"""The story of a task (pure): runs grouped by grant (a grant over two nodes is one run), renewals
folded into their run, usage summed exactly, and change sentences for `audit log`."""

from __future__ import annotations

from datetime import timedelta

from services.audit.queries import describe_change
from services.audit.reading import ArchivedEvent
from services.audit.story import story_json, tell
from shared.events import LeaseGranted, make_event
from shared.events.subjects import lease_subject
from tests.helpers.task_events import TaskStory
from tests.unit.audit.builders import T0, released, renewed, submitted, usage

H = timedelta(hours=1)


def grant(lease_id: str, node: str, *, at, cause: str | None = None, time_scale: float = 1.0,
          borrowed_headroom: bool = False) -> LeaseGranted:
    return make_event(
        LeaseGranted, subject=lease_subject(lease_id), subject_seq=1, producer="dispatcher/t", actor="service:dispatcher",
        occurred_at=at, causation_id=cause, data={
            "lease_id": lease_id, "task_id": "T1", "agent_id": f"a-{node}", "node_id": node, "card_type": "H100",
            "gpu_indices": [0, 1, 2, 3, 4, 5, 6, 7], "fencing_token": 1, "ttl_s": 30.0, "expires_at": at + H, "parts": 2,
            "time_scale": time_scale, "borrowed_headroom": borrowed_headroom,
        },
    )  # fmt: skip


def test_a_grant_over_two_nodes_is_one_run_and_a_later_grant_another() -> None:
    events = [
        submitted("T1"),
        grant("L1", "n1", at=T0, cause="C1"), grant("L2", "n2", at=T0, cause="C1"),  # one grant, two nodes
        renewed("L1", "T1", at=T0 + H / 2),
        released("L1", "T1", ended_at=T0 + H, gpus=8, reason="preempted"),
        released("L2", "T1", ended_at=T0 + H, gpus=8, reason="preempted"),
        usage("L1", "T1", start=T0, end=T0 + H, gpus=8), usage("L2", "T1", start=T0, end=T0 + H, gpus=8),
        grant("L3", "n1", at=T0 + 2 * H, cause="C2", time_scale=60.0, borrowed_headroom=True),
    ]
    story = story_json(tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)]))

    first, second = story["runs"]
    assert (first["lease_ids"], first["node_ids"], first["gpus"], first["renewals"]) == (["L1", "L2"], ["n1", "n2"], 16, 1)
    assert first["end_reason"] == "preempted" and first["gpu_hours"] == 16.0
    assert (second["run"], second["lease_ids"], second["ended_at"]) == (2, ["L3"], None)
    assert [s["type"] for s in story["steps"]].count("lease.renewed") == 0  # folded into the run
    assert [s["run"] for s in story["steps"] if s["type"] == "lease.granted"] == [1, 1, 2]
    assert story["gpu_hours"] == 16.0 and story["cost"] == 2 * round(8 * 3600 * 10 / 3600, 6)
    assert story["steps"][0]["sentence"].startswith("submitted: 'train' in project proj-a")
    grants = [s["sentence"] for s in story["steps"] if s["type"] == "lease.granted"]
    assert "simulated" not in grants[0] and "filler" not in grants[0]
    assert grants[2].endswith(", a simulated node (×60 the wall clock),"
                              " as a filler of the burst headroom (yields it to core work at once)")


def test_change_sentences() -> None:
    assert describe_change("quota.granted", {"project": "llm", "gpu_hours": 100.0, "card_type": "H100",
                                             "valid_from": "2026-01-01", "valid_to": "2026-02-01"}) == (
        "llm: 100 GPU-h on H100, 2026-01-01 to 2026-02-01")  # fmt: skip
    assert describe_change("config.changed", {"file": "policy.yaml", "old_version": "v1", "new_version": "v2"}) == (
        "policy.yaml: version v1 -> v2")
    assert describe_change("token.created", {"name": "alice", "role": "auditor", "scopes": ["x"]}) == "name=alice, role=auditor"
    assert describe_change("agent.unenrolled", {"agent_id": "gpu-7", "redis_user": "agent.gpu-7", "reason": "retired"}) == (
        "agent gpu-7: Redis user agent.gpu-7 deleted: its password is refused")
    assert describe_change("agent.enrolled", {"agent_id": "gpu-7", "redis_user": "agent.gpu-7"}) == (
        "agent gpu-7: Redis user agent.gpu-7 may now log in")


def test_a_transition_carried_by_the_next_event_is_told_as_a_step_of_its_own() -> None:
    def told(events: list) -> list[tuple[str, int | None, str]]:
        story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
        return [(step.type, step.run, step.sentence) for step in story.steps]

    alone, carried = TaskStory("T1"), TaskStory("T1")
    separate = told([alone.submitted(), alone.queued(), alone.granted(), alone.started(), alone.succeeded()])
    events = [carried.submitted(), carried.granted(queued=True), carried.succeeded(started_on="n1")]
    assert told(events) == separate
    story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
    assert [step.event_id for step in story.steps[1:]] == [events[1].event_id] * 2 + [events[2].event_id] * 2
    assert story.runs[0].started_at == events[2].occurred_at


def test_a_failure_that_carries_its_start_is_told_with_the_start_first() -> None:
    def told(events: list) -> list[tuple[str, int | None, str]]:
        story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
        return [(step.type, step.run, step.sentence) for step in story.steps]

    alone, carried = TaskStory("T1"), TaskStory("T1")
    separate = told([alone.submitted(), alone.granted(), alone.started(), alone.failed("boom", 3)])
    assert told([carried.submitted(), carried.granted(), carried.failed("boom", 3, started_on="n1")]) == separate


def test_a_lease_end_carried_by_the_run_end_is_told_as_a_step_of_its_own() -> None:
    def told(events: list) -> list[tuple[str, int | None, str]]:
        story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
        return [(step.type, step.run, step.sentence) for step in story.steps]

    for outcome in ("succeeded", "failed"):
        alone, carried = TaskStory("T1"), TaskStory("T1")
        end = alone.succeeded if outcome == "succeeded" else alone.failed
        separate = told([alone.submitted(), alone.granted(), alone.started(), alone.released(outcome), end()])
        carrier = carried.succeeded if outcome == "succeeded" else carried.failed
        events = [carried.submitted(), carried.granted(), carrier(started_on="n1", releasing=True)]
        assert told(events) == separate
        assert [step.type for step in tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)]).steps] == [
            "task.submitted", "lease.granted", "task.started", "lease.released", f"task.{outcome}"]
        story = tell("T1", [ArchivedEvent(n, e) for n, e in enumerate(events, 1)])
        assert (story.runs[0].end_reason, story.runs[0].ended_at) == (outcome, carried.release_facts(outcome)["ended_at"])
