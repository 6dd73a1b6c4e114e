"""Standard work that checkpoints fills the headroom and yields it to core work, in the simulator
(`Policy.checkpointing_standard_borrows`).

One node of 8 GPUs, 2 kept as headroom (25%, whatever core work there is). S1 (6 GPUs, no checkpoints)
starts at 0; S2 (2 GPUs, checkpoints every 300 s, 5,000 s) arrives at 1 and may only use the headroom;
core task C (2 GPUs) arrives at 100 onto a full node where no opportunistic work runs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.scheduling.model import PriorityClass
from shared.scheduling.policies import POLICIES
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation

from .test_hand_computed import task

TRACE = [task("S1", 0, 6, 10_000), task("S2", 1, 2, 5_000, checkpoint=300), task("C", 100, 2, 100, PriorityClass.CORE)]


@pytest.mark.parametrize(
    ("fillers", "waits", "preemptions"),
    [
        # off: S2 waits for S1's end; C takes the idle headroom at once
        (dict(checkpointing_standard_borrows=False), {"S1": 0, "S2": 9_999, "C": 0}, 0),
        # on: S2 fills the headroom at once; C preempts it when its 600 s grace ends (the simulator plans then
        # although the node is full and no opportunistic work runs)
        (dict(fillers_yield_at_once=False), {"S1": 0, "S2": 0, "C": 600}, 1),
        # on, yielding at once (the cardflow preset): C takes S2's GPUs as soon as it arrives
        ({}, {"S1": 0, "S2": 0, "C": 0}, 1),
    ],
)
def test_a_checkpointing_standard_task_fills_the_headroom_until_core_work_needs_it(fillers, waits, preemptions):
    policy = replace(POLICIES["cardflow"], headroom=0.25, headroom_tracks_core=False, **fillers)
    recorder = Simulation(TRACE, parse_cluster_spec("X:1x8"), policy).run().recorder
    assert recorder.waits == waits
    assert recorder.preemptions == preemptions
