"""Standard work that checkpoints yields to core work past its grace, in the simulator
(`Policy.checkpointing_standard_yields`).

One node of 8 GPUs, no headroom. S1 (6 GPUs, no checkpoints) and S2 (2 GPUs, checkpoints every 300 s) start at 0
and run 10,000 s; core task C (2 GPUs) arrives at 100 onto the full node, where no opportunistic work runs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.scheduling.model import PriorityClass
from shared.scheduling.policies import POLICIES
from shared.simulation.cluster import parse_cluster_spec
from shared.simulation.engine import Simulation

from .test_hand_computed import task

TRACE = [task("S1", 0, 6, 10_000), task("S2", 0, 2, 10_000, checkpoint=300), task("C", 100, 2, 100, PriorityClass.CORE)]


@pytest.mark.parametrize(
    ("on", "waits", "preemptions"),
    [
        # off: C waits for the standard work to end
        (False, {"S1": 0, "S2": 0, "C": 9_900}, 0),
        # on: C preempts S2 when its 600 s grace ends (the simulator plans then although the node is full and
        # neither opportunistic work nor a filler runs); S2 resumes once C is done
        (True, {"S1": 0, "S2": 0, "C": 600}, 1),
    ],
)
def test_core_work_past_its_grace_takes_the_gpus_of_standard_work_that_checkpoints(on, waits, preemptions):
    policy = replace(POLICIES["cardflow"], headroom=0.0, checkpointing_standard_yields=on)
    recorder = Simulation(TRACE, parse_cluster_spec("X:1x8"), policy).run().recorder
    assert recorder.waits == waits
    assert recorder.preemptions == preemptions
