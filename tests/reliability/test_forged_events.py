"""Forged events (issue 15: a `task.succeeded` written straight onto cf:events by a non-dispatcher
producer was believed by the views and the ledger while the dispatcher still had the task
running). A consumer now refuses a dispatcher-owned event from any other producer and
dead-letters it with the reason.

What this does NOT prove yet: the `producer` field is written by whoever XADDs; until each service
has its own Redis user that alone may write what it owns (item 3, open), a forger can still claim
to be the dispatcher. bench/chaos.py measures both cases."""

from __future__ import annotations

import pytest

from services.console.projector import SPEC as VIEWS
from services.console.views import load_task
from shared.delivery.deadletter import read_deadletters
from shared.events import make_event
from shared.events.ownership import refused_producer
from shared.settings import Settings
from tests.helpers.running_services import RunningServices
from tests.helpers.task_events import TaskStory


@pytest.mark.parametrize(
    ("event_type", "producer", "refused"),
    [
        ("task.succeeded", "dispatcher/local-1", False),
        ("task.succeeded", "intruder/1", True),
        ("lease.granted", "intake/local-1", True),
        ("task.submitted", "console/local-1", False),  # not a dispatcher facet: owner checks elsewhere
    ],
)
def test_dispatcher_facets_are_trusted_only_from_the_dispatcher(event_type: str, producer: str, refused: bool) -> None:
    story = TaskStory("T1")
    event = {"task.succeeded": story.succeeded, "lease.granted": story.granted, "task.submitted": story.submitted}[event_type]()
    forged = event.model_copy(update={"producer": producer})
    assert (refused_producer(forged) is not None) is refused


async def test_a_forged_success_is_dead_lettered_and_the_views_keep_the_truth(fresh_settings: Settings) -> None:
    story = TaskStory("T-forged")
    honest = [story.submitted(), story.queued(), story.granted(), story.started()]
    forged = make_event(
        "task.succeeded", subject=honest[0].subject, subject_seq=99, producer="intruder/1", actor="upstream:intruder",
        data={"task_id": "T-forged", "lease_id": story.lease_id, "output_units": 1e9},
    )
    async with RunningServices(fresh_settings, VIEWS) as services:
        await services.publish(*honest, forged)

        async def dead_lettered() -> bool:
            return any(d.original.get(b"event_id") == forged.event_id.encode() for d in await read_deadletters(services.redis))

        async def projected() -> bool:
            view = await load_task(services.pool, "T-forged")
            return view is not None and view.state.value == "running"

        assert await services.wait_until(dead_lettered)
        assert await services.wait_until(projected)
        await services.publish(story.succeeded())  # the dispatcher's own word still counts

        async def succeeded() -> bool:
            view = await load_task(services.pool, "T-forged")
            return view is not None and view.state.value == "succeeded"

        assert await services.wait_until(succeeded)
    [dead] = [d for d in await read_deadletters(services.redis) if d.original.get(b"event_id") == forged.event_id.encode()]
    assert dead.reason == "invalid" and "intruder" in dead.error and "dispatcher" in dead.error
