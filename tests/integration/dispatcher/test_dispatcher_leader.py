"""One active dispatcher: a second instance stays standby until the leader stops, then takes over
(loading the working set, leases included, from the tables)."""

from __future__ import annotations

from shared.settings import Settings
from tests.integration.dispatcher.harness import DispatcherHarness
from tests.unit.dispatcher.builders import a_ready_task, finished, registered


async def test_a_second_instance_stays_standby_and_takes_over_when_the_leader_stops(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start("first")
        assert await h.wait_until(lambda: _leader_is(h, 1, "dispatcher/first-"))
        h.start("second")
        await h.report(registered("a1", "n1", gpus=2))
        await h.publish(*a_ready_task("T1"))
        await h.wait_for_events("lease.granted")
        assert await _leader_is(h, 1, "dispatcher/first-")  # the second instance never took the lock

        await h.stop("first")
        assert await h.wait_until(lambda: _leader_is(h, 2, "dispatcher/second-"))
        await h.publish(*a_ready_task("T2"))
        grants = await h.wait_for_events("lease.granted", 2)
        # the new leader loaded the lease the old one granted: the agent's report about it is applied
        first = grants[0].data
        await h.report(finished("a1", first.lease_id, "T1", first.fencing_token, exit_code=0))
        succeeded = await h.wait_for_events("task.succeeded")

    assert [g.data.task_id for g in grants] == ["T1", "T2"]
    assert [e.data.task_id for e in succeeded] == ["T1"] and succeeded[0].producer.startswith("dispatcher/second-")
    assert grants[0].producer.startswith("dispatcher/first-") and grants[1].producer.startswith("dispatcher/second-")
    assert grants[1].data.fencing_token > grants[0].data.fencing_token


async def _leader_is(h: DispatcherHarness, epoch: int, holder_prefix: str) -> bool:
    rows = await h.fetch("SELECT epoch, holder FROM dispatcher.leader")
    return bool(rows) and rows[0]["epoch"] == epoch and rows[0]["holder"].startswith(holder_prefix)
