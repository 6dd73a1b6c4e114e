"""`holder_reclaims_within_headroom` works where the dispatcher plans: the operators' policy document carries it
(`backfill.holder_reclaims_within_headroom`, on unless a document says otherwise) and the rule reads only what the
dispatcher's snapshot holds (free GPUs, opportunistic leases, the headroom), built here from its records.

The fleet of tests/unit/scheduling/test_holder_reclaims.py, as dispatcher records: two 8-GPU nodes, headroom 4 of
16. Node a: a 4-GPU opportunistic filler that checkpoints, a long standard lease, 2 GPUs free. Node b: a 2-GPU
standard lease past its estimate and a long standard lease. The 4-GPU standard holder is due only if the filler
yields, and even then 2 + 4 free GPUs leave 2 < 4 beside it: the headroom refuses it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.config import POLICY, scheduling_policy, validate_document
from shared.events.states import TaskState
from shared.leasing.snapshot import build_queue, build_snapshot
from shared.scheduling.model import CardOption, PriorityClass
from shared.scheduling.plan import plan
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_node_record, a_task_record

HEADROOM = "headroom: {default: 0.25, tracks_core: false}\n"
HOUR = timedelta(hours=1)


def _records():  # noqa: ANN202
    nodes = [a_node_record("a", "agent-a", gpus=8), a_node_record("b", "agent-b", gpus=8)]
    tasks = [
        a_task_record("filler", priority_class=PriorityClass.OPPORTUNISTIC, gpus=4, checkpoint_interval_s=600.0),
        a_task_record("long-a", gpus=2), a_task_record("overdue", gpus=2), a_task_record("long-b", gpus=6),
        a_task_record("holder", gpus=4, state=TaskState.QUEUED, run=0, submitted_at=NOW - HOUR,
                      options=(CardOption("H100", 10 * 3600.0, 1.0),)),
    ]
    leases = [
        a_lease_record("Lo", "filler", node_id="a", gpus=(0, 1, 2, 3), granted_at=NOW - timedelta(minutes=2),
                       estimated_end=NOW + 9 * HOUR),
        a_lease_record("La", "long-a", node_id="a", gpus=(4, 5), estimated_end=NOW + 9 * HOUR),
        a_lease_record("Lover", "overdue", node_id="b", gpus=(0, 1), estimated_end=NOW - timedelta(minutes=1)),
        a_lease_record("Lb", "long-b", node_id="b", gpus=(2, 3, 4, 5, 6, 7), estimated_end=NOW + 9 * HOUR),
    ]
    return nodes, {task.task_id: task for task in tasks}, leases


@pytest.mark.parametrize(
    ("document", "preempted"),
    [
        (HEADROOM, []),  # the default: the holder waits, the filler keeps running
        (HEADROOM + "backfill: {holder_reclaims_within_headroom: false}\n", ["Lo"]),  # off: it reclaims in vain
    ],
)
def test_the_policy_document_in_force_decides_whether_a_refused_holder_reclaims_its_fillers(document, preempted):
    nodes, tasks, leases = _records()
    snapshot = build_snapshot(nodes, leases, tasks, [], NOW.timestamp())
    queue = build_queue(task for task in tasks.values() if task.task_id == "holder")
    result = plan(snapshot, queue, scheduling_policy(validate_document(POLICY, document).model), NOW.timestamp())
    assert [p.lease_id for p in result.preemptions] == preempted
