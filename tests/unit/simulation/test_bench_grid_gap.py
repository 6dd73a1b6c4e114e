"""bench/grid_gap.py: the free GPUs after a plan, split by what kept them free (hand-built plans)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from shared.scheduling.model import Snapshot
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import grid_gap  # noqa: E402

from tests.unit.scheduling.builders import NOW, a_lease, a_node, a_task, built  # noqa: E402

STRICT = replace(POLICIES["priority"], name="priority")  # head-of-line blocking: no reservation, nothing backfilled


def _parts(queue, policy=STRICT):
    """Nodes a and b with 3 GPUs free each (standard work on the rest)."""
    nodes = [a_node("a").free_indices(5, 6, 7), a_node("b").free_indices(5, 6, 7)]
    leases = [a_lease("La").on("a").gpus(0, 1, 2, 3, 4).ends(NOW + 3600),
              a_lease("Lb").on("b").gpus(0, 1, 2, 3, 4).ends(NOW + 7200)]
    snapshot = Snapshot(nodes=tuple(built(n) for n in nodes), leases=tuple(built(l) for l in leases), quotas={})
    tasks = [built(task) for task in queue]
    return grid_gap.idle_parts(snapshot, tasks, plan(snapshot, tasks, policy, NOW), policy)


@pytest.mark.parametrize(
    ("queue", "policy", "part"),
    [
        ([], STRICT, "nothing ready waits"),
        ([a_task("w").gpus(4)], STRICT, "fragmentation"),  # 6 free would hold it, no node does
        ([a_task("w").gpus(8)], STRICT, "too narrow"),  # wider than every free GPU together
        # waits for its data, not for GPUs (under the readiness gate; the baselines have none)
        ([a_task("w").gpus(4).not_ready()], replace(STRICT, readiness_gate=True), "nothing ready waits"),
        ([a_task("w").gpus(4).not_ready()], STRICT, "fragmentation"),
    ],
)
def test_the_idle_gpus_go_to_one_part(queue, policy, part):
    parts = _parts(queue, policy)
    assert parts[part] == 6 and sum(parts.values()) == 6


def test_a_reservations_nodes_are_its_drain():
    parts = _parts([a_task("w").gpus(8)], POLICIES["easy-backfill"])
    assert parts["reservation drain"] == 3 and parts["too narrow"] == 3  # node a empties first: its 3 free are held
