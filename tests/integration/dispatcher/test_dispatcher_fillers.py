"""Standard fillers on the headroom (`Policy.checkpointing_standard_borrows`) in the live dispatcher: the lease
row keeps that its grant borrowed the headroom (`leases.borrowed_headroom`), so a dispatcher that reloads its
leases from PostgreSQL lets core work take the filler back — the simulator's decision, made by the same rule
(`plan()`'s victims: `shared/scheduling/preemption.py`, a standard lease is a victim only if it borrowed); its
`lease.granted` says so too."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.scheduling.policies import POLICIES
from shared.settings import Settings
from tests.integration.dispatcher.harness import DispatcherHarness
from tests.unit.dispatcher.builders import a_ready_task, registered

LONG = (("H100", 7200.0, 1.0),)  # two hours: no standard task returns the headroom within a grace by itself


@pytest.fixture
def fillers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preset with fillers on and a fixed headroom: 1 of the node's 4 GPUs is kept from standard work."""
    filling = replace(POLICIES["cardflow"], checkpointing_standard_borrows=True, headroom=0.25,
                      headroom_tracks_core=False)
    monkeypatch.setitem(POLICIES, "cardflow", filling)


@pytest.mark.usefixtures("fillers")
async def test_a_borrowed_filler_is_taken_back_by_core_work_after_the_dispatcher_restarts(
    fresh_settings: Settings,
) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start("first")
        await h.report(registered("a1", "n1", gpus=4))
        await h.publish(*a_ready_task("S0", LONG, priority_class="standard", gpus=2))
        await h.wait_for_commands("a1")
        # 2 GPUs left, one of them the headroom: only a filler (it checkpoints) may take both
        await h.publish(*a_ready_task("S1", LONG, priority_class="standard", gpus=2, checkpoint_minutes=30))
        filler = (await h.wait_for_commands("a1", 2))[1].data
        stored = await h.leases("S1")

        await h.stop("first")  # the next instance plans from the tables alone
        h.start("second")
        await h.publish(*a_ready_task("C1", LONG, priority_class="core", gpus=1))
        preempt = (await h.wait_for_commands("a1", 3))[2]
        grants = await h.wait_for_count(lambda: h.events("lease.granted"), 2)

    assert [row["borrowed_headroom"] for row in stored] == [True]
    # the archive says so too (audit replay and verify compare it with the row)
    assert {g.data.task_id: g.data.borrowed_headroom for g in grants} == {"S0": False, "S1": True}
    assert preempt.type == "command.preempt" and preempt.data.lease_id == filler.lease_id
    assert preempt.producer.startswith("dispatcher/second-")
