"""Properties of the task projection over random lifecycles (hypothesis).

A lifecycle is built per owning service, each in a valid order; the events are then interleaved
in any way that keeps each owner's own order (what Redis streams guarantee per producer).
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.events import Envelope
from shared.projection import evolve, fold, replay_order
from tests.helpers.task_events import OWNERS, TaskStory

# dispatcher moves allowed from each phase of a run
_MOVES = {
    "idle": ("queued", "held", "granted", "cancelled"),
    "leased": ("started", "requeued", "cancelled", "granted"),
    "running": ("checkpointed", "succeeded", "failed", "requeued", "cancelled"),
}
_NEXT_PHASE = {"queued": "idle", "held": "idle", "granted": "leased", "started": "running", "checkpointed": "running",
               "requeued": "idle", "succeeded": "done", "failed": "done", "cancelled": "done"}


@st.composite
def lifecycles(draw) -> TaskStory:
    """One task's events from every owner, each owner's list in a valid order."""
    story = TaskStory("T1")
    if draw(st.booleans()) and draw(st.integers(0, 9)) == 0:
        story.rejected()
        return story
    if draw(st.booleans()):
        story.submitted()
    for ready in draw(st.lists(st.booleans(), max_size=3)):
        story.readiness(ready, fraction=draw(st.sampled_from((0.0, 0.5))))
    for matched in draw(st.lists(st.booleans(), max_size=2)):
        story.matched() if matched else story.unmatchable()
    _dispatcher_run(story, draw(st.lists(st.integers(0, 4), max_size=10)), draw(st.floats(0.0, 1.0)))
    if draw(st.booleans()):
        story.cancel_requested("no longer needed")
    for _ in range(draw(st.integers(0, 2))):
        story.usage(gpu_seconds=draw(st.floats(0, 1e4)), cost=draw(st.floats(0, 100)))
    if not any(story.by_owner.values()):
        story.submitted()
    return story


def _dispatcher_run(story: TaskStory, choices: list[int], progress: float) -> None:
    phase = "idle"
    for choice in choices:
        if phase == "done":
            return
        move = _MOVES[phase][choice % len(_MOVES[phase])]
        if move == "checkpointed":
            story.checkpointed(progress)
        else:
            getattr(story, move)()
        phase = _NEXT_PHASE[move]


@st.composite
def interleavings(draw, story: TaskStory) -> list[Envelope]:
    """The story's events in an order that keeps each owner's own order."""
    queues = {owner: list(story.by_owner[owner]) for owner in OWNERS if story.by_owner[owner]}
    order: list[Envelope] = []
    while queues:
        owner = draw(st.sampled_from(sorted(queues)))
        order.append(queues[owner].pop(0))
        if not queues[owner]:
            del queues[owner]
    return order


def emission_order(story: TaskStory) -> list[Envelope]:
    return sorted((e for events in story.by_owner.values() for e in events), key=lambda e: e.occurred_at)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_order_that_keeps_each_producers_order_gives_the_same_view(data: st.DataObject) -> None:
    story = data.draw(lifecycles())
    expected = fold(emission_order(story))
    shuffled = data.draw(interleavings(story))
    got = fold(shuffled)
    assert got == expected  # the whole view, so in particular the (terminal) state and reason
    assert got["T1"].state == expected["T1"].state


@settings(max_examples=150, deadline=None)
@given(story=lifecycles(), seed=st.integers(0, 2**32 - 1), repeats=st.integers(1, 3))
def test_duplicates_change_nothing(story: TaskStory, seed: int, repeats: int) -> None:
    events = emission_order(story)
    noisy = list(events)
    rng = random.Random(seed)
    for _ in range(repeats):  # redeliver some events right after themselves, or again at the end
        duplicate = rng.choice(events)
        position = noisy.index(duplicate) + 1 if rng.random() < 0.5 else len(noisy)
        noisy.insert(position, duplicate)
    assert fold(noisy) == fold(events)


@settings(max_examples=150, deadline=None)
@given(story=lifecycles(), seed=st.integers(0, 2**32 - 1))
def test_replay_order_rebuilds_the_same_view_from_any_shuffle(story: TaskStory, seed: int) -> None:
    events = emission_order(story)
    shuffled = list(events)
    random.Random(seed).shuffle(shuffled)
    assert fold(replay_order(shuffled)) == fold(events)


@settings(max_examples=150, deadline=None)
@given(story=lifecycles())
def test_every_view_has_a_reason_and_terminal_views_have_an_end(story: TaskStory) -> None:
    view = None
    for event in emission_order(story):
        view = evolve(view, event)
        assert view is not None and view.reason and view.reason_detail
    if view.is_terminal:
        assert view.finished_at is not None
