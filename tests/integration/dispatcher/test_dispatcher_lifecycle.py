"""Preemption, agent re-registration and quota holds, end to end through the dispatcher."""

from __future__ import annotations

from datetime import timedelta

from shared.events import utcnow
from shared.settings import Settings
from tests.integration.dispatcher.harness import FAST, DispatcherHarness
from tests.unit.dispatcher.builders import (
    a_ready_task,
    checkpointed,
    finished,
    quota_adjusted,
    quota_granted,
    registered,
)


def yielded(agent_id: str, grant, checkpoint_uri: str, preemptor: str) -> tuple:
    """What an agent reports for a preempted lease: a checkpoint, then the end of the run."""
    lease, task, token = grant.lease_id, grant.task_id, grant.fencing_token
    return (checkpointed(agent_id, lease, task, token, checkpoint_uri),
            finished(agent_id, lease, task, token, exit_code=None, error=f"preempted: {preemptor} needs the GPUs"))


async def consumed(h: DispatcherHarness, event_id: str) -> bool:
    return bool(await h.fetch("SELECT 1 FROM dispatcher.inbox WHERE event_id = $1", event_id))


async def test_core_work_preempts_opportunistic_work_which_resumes_from_its_checkpoint(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=2))
        await h.publish(*a_ready_task("O1", gpus=2, priority_class="opportunistic"))
        victim = (await h.wait_for_commands("a1"))[0].data
        await h.publish(*a_ready_task("C1", gpus=2, priority_class="core"))
        preempt = (await h.wait_for_commands("a1", 2))[1]
        revoked = await h.wait_for_events("lease.revoked")

        await h.report(*yielded("a1", victim, "sim://O1/0.4", "core task C1"))
        grant = (await h.wait_for_commands("a1", 3))[2]
        requeued = await h.wait_for_events("task.requeued")
        released = await h.wait_for_events("lease.released")
        assert await h.task_state("O1") == "queued"

    assert preempt.type == "command.preempt" and preempt.data.lease_id == victim.lease_id
    assert [(e.data.lease_id, e.data.reason) for e in revoked] == [(victim.lease_id, "preempted")]
    assert [(e.data.reason, e.data.resume_from) for e in requeued] == [("preempted", "sim://O1/0.4")]
    assert [(e.data.lease_id, e.data.reason) for e in released] == [(victim.lease_id, "preempted")]
    assert grant.type == "command.lease_grant" and grant.data.task_id == "C1"


async def test_a_restarted_agent_loses_what_it_does_not_hold_but_not_grants_still_in_flight(
    fresh_settings: Settings,
) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=1, started_at=utcnow() - timedelta(minutes=5)))
        await h.publish(*a_ready_task("T1"))
        first = (await h.wait_for_commands("a1"))[0].data

        restart = utcnow()  # the agent restarted after the grant and holds nothing
        await h.report(registered("a1", "n1", gpus=1, started_at=restart))
        second = (await h.wait_for_commands("a1", 2))[1].data
        requeued = await h.wait_for_events("task.requeued")
        released = await h.wait_for_events("lease.released")

        periodic = registered("a1", "n1", gpus=1, started_at=restart)  # before the second grant arrived
        await h.report(periodic)
        assert await h.wait_until(lambda: consumed(h, periodic.event_id))
        active = await h.fetch("SELECT lease_id FROM dispatcher.leases WHERE state = 'active'")
        holding = registered("a1", "n1", gpus=1, started_at=restart, held=[(second.lease_id, "T1", second.fencing_token)])
        await h.report(holding)
        assert await h.wait_until(lambda: consumed(h, holding.event_id))
        renewals = await h.wait_for_events("lease.renewed")
        registrations = await h.events("node.registered")

    assert [(e.data.lease_id, e.data.reason) for e in released] == [(first.lease_id, "revoked")]
    assert [(e.data.lease_id, e.data.reason) for e in requeued] == [(first.lease_id, "agent_failed")]
    assert [row["lease_id"] for row in active] == [second.lease_id]
    assert [e.data.lease_id for e in renewals] == [second.lease_id]
    assert len(registrations) == 1  # re-registrations that change nothing are not republished


async def test_a_task_over_its_quota_is_held_until_the_quota_grows(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=2))
        await h.publish(quota_granted("proj-q", 0.1))  # 1 GPU x 600 s = 0.167 GPU-hours needed
        await h.publish(*a_ready_task("T1", project="proj-q"))
        held = await h.wait_for_events("task.held")
        assert await h.task_state("T1") == "held"
        await h.publish(quota_adjusted("proj-q", 1.0))
        grants = await h.wait_for_events("lease.granted")
        queued = await h.events("task.queued")

    assert [(e.data.task_id, e.data.reason) for e in held] == [("T1", "quota_exhausted")]
    assert "proj-q" in held[0].data.detail
    assert [e.data.task_id for e in grants] == ["T1"] and queued == []  # eligible and granted in one cycle:
    assert grants[0].data.queued is not None and grants[0].data.queued.project == "proj-q"  # the grant carries it


async def test_a_task_spanning_nodes_succeeds_with_its_last_part_and_fails_with_any(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=2), registered("a2", "n2", gpus=2))
        await h.publish(*a_ready_task("T1", gpus=4))
        parts = [e.data for e in await h.wait_for_events("lease.granted", 2)]
        await h.report(finished(parts[0].agent_id, parts[0].lease_id, "T1", parts[0].fencing_token))
        assert await h.wait_until(lambda: _released(h, 1))
        assert await h.task_state("T1") in ("leased", "running")  # one part still runs
        await h.report(finished(parts[1].agent_id, parts[1].lease_id, "T1", parts[1].fencing_token))
        await h.wait_for_events("task.succeeded")

        await h.publish(*a_ready_task("T2", gpus=4))
        parts = [e.data for e in await h.wait_for_events("lease.granted", 4) if e.data.task_id == "T2"]
        await h.report(finished(parts[0].agent_id, parts[0].lease_id, "T2", parts[0].fencing_token, exit_code=2))
        failed = await h.wait_for_events("task.failed")
        revoke = [c for c in await h.wait_for_commands(parts[1].agent_id, 3) if c.type == "command.revoke"]

    assert {p.parts for p in parts} == {2} and {p.node_id for p in parts} == {"n1", "n2"}
    assert [(e.data.task_id, e.data.exit_code) for e in failed] == [("T2", 2)]
    assert failed[0].data.started is not None and failed[0].data.started.node_id == parts[0].node_id  # no report came first
    assert [(c.data.lease_id, c.data.reason) for c in revoke] == [(parts[1].lease_id, "superseded")]


async def _released(h: DispatcherHarness, count: int) -> bool:
    return len(await h.events("lease.released")) >= count


async def test_core_work_waits_out_its_preemption_grace_before_it_preempts(fresh_settings: Settings) -> None:
    """With `preempt_after_s` = 2 s, the core task is held (the GPUs are busy) for about 2 s after its
    submission; only then is the opportunistic lease preempted."""
    async with DispatcherHarness(fresh_settings) as h:
        h.start(config=FAST.model_copy(update={"preempt_after_s": 2.0}))
        await h.report(registered("a1", "n1", gpus=2))
        await h.publish(*a_ready_task("O1", gpus=2, priority_class="opportunistic"))
        await h.wait_for_commands("a1")
        core = a_ready_task("C1", gpus=2, priority_class="core")
        await h.publish(*core)
        preempt = (await h.wait_for_commands("a1", 2))[1]

    assert preempt.type == "command.preempt"
    waited = preempt.occurred_at - core[0].occurred_at
    assert timedelta(seconds=2.0) <= waited < timedelta(seconds=10.0)


async def test_opportunistic_work_fills_a_reservation_and_yields_when_it_is_due(fresh_settings: Settings) -> None:
    """4 GPUs. Standard L (2 GPUs) runs; standard W (4 GPUs) cannot start and holds the reservation for
    when L is expected to end; opportunistic F, which checkpoints, runs on the 2 idle GPUs meanwhile (a
    baseline would keep them idle: F would run past W's start). When L ends, W's reservation is due:
    F is preempted for W, and W starts."""
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=4))
        await h.publish(*a_ready_task("L", gpus=2, priority_class="standard"))
        running = (await h.wait_for_commands("a1"))[0].data
        await h.publish(*a_ready_task("W", gpus=4, priority_class="standard"))
        await h.publish(*a_ready_task("F", gpus=2, priority_class="opportunistic", checkpoint_minutes=10))
        filler = (await h.wait_for_commands("a1", 2))[1].data
        assert await h.task_state("W") == "queued"

        await h.report(finished("a1", running.lease_id, "L", running.fencing_token))
        preempt = (await h.wait_for_commands("a1", 3))[2]
        await h.report(*yielded("a1", filler, "sim://F/0.1", "standard task W"))
        grant = (await h.wait_for_commands("a1", 4))[3]
        revoked = await h.wait_for_events("lease.revoked")

    assert filler.task_id == "F"
    assert preempt.type == "command.preempt" and preempt.data.lease_id == filler.lease_id
    assert [(e.data.lease_id, e.data.reason) for e in revoked] == [(filler.lease_id, "preempted")]
    assert grant.type == "command.lease_grant" and grant.data.task_id == "W"
