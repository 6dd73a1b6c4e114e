"""Losing an agent: its lease expires and the task resumes from its checkpoint on another agent;
reports carrying a stale fencing token (a paused agent coming back, or a forged one) are refused."""

from __future__ import annotations

import signal
from typing import Any

from shared.delivery.wire import wire_fields
from shared.events import Envelope, TaskState, make_event
from shared.events.reports import TaskFinished
from shared.events.subjects import agent_subject
from shared.names import REPORTS_STREAM
from tests.helpers.system import RunningSystem, double_leases

# 8 GPUs (core: standard work may not take a card type's headroom), 80 GB each (H100 only): about 16 s of real time at x600,
# a checkpoint every real second (long enough that a loaded machine's lag in seeing the first checkpoint leaves the run
# running when the test stops its agent).
LONG_TASK = {
    "name": "long-finetune", "project": "llm", "priority_class": "core", "gpus": 8, "min_vram_gb": 80,
    "estimate_gpu_hours": 68, "profile": "compute", "checkpoint": {"interval_minutes": 10},
}  # fmt: skip
TIME_SCALE = 600


def events_of(system: RunningSystem, event_type: str, task_id: str) -> list[Envelope]:
    return [e for e in system.of_type(event_type) if e.data.task_id == task_id]


def first_lease(system: RunningSystem) -> Envelope | None:
    view = system.task_by_name(LONG_TASK["name"])
    grants = events_of(system, "lease.granted", view.id) if view else []
    return grants[0] if grants else None


async def run_long_task_on(system: RunningSystem, agent_id: str, *, standby: str) -> tuple[str, Envelope]:
    """Submit the long task with only `agent_id` up; start the `standby` agent once the task is leased
    there (it registers while the task runs); wait until the task checkpointed.

    The caller stops `agent_id` right after this returns. The test sees the first checkpoint only
    once the event views have it, so on a loaded machine the run may be seconds further on when the
    stop lands (a 6 s lag put a 8 s run at its end). Once the first lease ends, best-fit placement
    (fewest free GPUs that fit) prefers the standby's 8 GPUs over the first agent's 16, so the task
    moves there even while the first agent is only paused.
    """
    system.start_agent(agent_id, "H100x16", time_scale=TIME_SCALE)
    await system.submit([LONG_TASK])
    grant = await system.wait_for(first_lease, what="the first lease")
    assert grant.data.agent_id == agent_id
    system.start_agent(standby, "H100x8", time_scale=TIME_SCALE)
    await system.wait_for(lambda s: events_of(s, "task.checkpointed", grant.data.task_id), what="a checkpoint")
    return grant.data.task_id, grant


async def standby_registered(system: RunningSystem, agent_id: str) -> None:
    await system.wait_for(lambda s: [e for e in s.of_type("node.registered") if e.data.agent_id == agent_id],
                          what=f"{agent_id} to register")  # fmt: skip


async def test_a_killed_agents_task_resumes_from_its_checkpoint_on_another_agent(system: RunningSystem) -> None:
    task_id, first = await run_long_task_on(system, "h100-a", standby="h100-b")
    system.kill_agent("h100-a", signal.SIGKILL)
    await standby_registered(system, "h100-b")
    requeued = await system.wait_for(lambda s: events_of(s, "task.requeued", task_id), what="the task to be requeued")
    second = await system.wait_for(lambda s: events_of(s, "lease.granted", task_id)[1:], what="a second lease")
    await system.wait_for(lambda s: s.views[task_id].state is TaskState.SUCCEEDED, what="the task to succeed")

    checkpoints = [e.data.checkpoint_uri for e in events_of(system, "task.checkpointed", task_id)
                   if e.data.lease_id == first.data.lease_id]  # fmt: skip
    (expired,) = [e for e in system.of_type("lease.expired") if e.data.lease_id == first.data.lease_id]
    assert expired.data.task_id == task_id
    assert [(r.data.reason, r.data.lease_id) for r in requeued] == [("lease_expired", first.data.lease_id)]
    assert requeued[0].data.resume_from == checkpoints[-1]
    assert (second[0].data.agent_id, second[0].data.resume_from) == ("h100-b", checkpoints[-1])
    started = events_of(system, "task.started", task_id)
    assert [s.data.resumed_from for s in started] == [None, checkpoints[-1]]
    (succeeded,) = events_of(system, "task.succeeded", task_id)
    assert succeeded.data.lease_id == second[0].data.lease_id
    assert double_leases(system.events) == []


async def test_reports_with_a_stale_fencing_token_are_rejected(system: RunningSystem) -> None:
    task_id, first = await run_long_task_on(system, "h100-a", standby="h100-b")
    system.kill_agent("h100-a", signal.SIGSTOP)  # a paused agent: alive, silent, still thinks it holds the lease
    await standby_registered(system, "h100-b")
    second = (await system.wait_for(lambda s: events_of(s, "lease.granted", task_id)[1:], what="a second lease"))[0]
    assert second.data.fencing_token > first.data.fencing_token
    forged = await forge_finished(system, second.data, fencing_token=first.data.fencing_token)
    refusal = await system.wait_for(rejection_of(forged.event_id), what="the forged report to be refused")
    system.kill_agent("h100-a", signal.SIGCONT)  # it comes back and reports about its old lease
    await system.wait_for(lambda s: s.views[task_id].state is TaskState.SUCCEEDED, timeout=90, what="the task to succeed")

    assert (refusal["reason"], refusal["lease_id"]) == ("stale_token", second.data.lease_id)
    (succeeded,) = events_of(system, "task.succeeded", task_id)
    assert succeeded.occurred_at > refusal["received_at"]  # the forged "finished" did not end the task
    if succeeded.data.lease_id == first.data.lease_id:
        assert_late_success_reconciled(system, task_id, second.data.lease_id)
        stale = await rejections_from("h100-a")(system) or []
    else:
        assert succeeded.data.lease_id == second.data.lease_id
        stale = await system.wait_for(rejections_from("h100-a"), what="the old agent's reports to be refused")
    assert {(r["lease_id"], r["fencing_token"]) for r in stale} <= {(first.data.lease_id, first.data.fencing_token)}
    assert {r["reason"] for r in stale} <= {"lease_ended", "stale_token"}
    assert double_leases(system.events) == []


def assert_late_success_reconciled(system: RunningSystem, task_id: str, newer_lease_id: str) -> None:
    """The paused agent's run reached its end before the stop order did (on a loaded machine the test
    sees the first checkpoint late, so the pause can fall just before the finish): its clean
    `report.finished` about the expired lease is reconciled (`shared/leasing/late_report.py`) — the
    task succeeded with that run, and the newer run was revoked as superseded, not run to a second end."""
    revoked = [e.data.reason for e in events_of(system, "lease.revoked", task_id) if e.data.lease_id == newer_lease_id]
    assert revoked == ["superseded"]


async def forge_finished(system: RunningSystem, lease: Any, *, fencing_token: int) -> Envelope:
    """A `report.finished` (exit 0) from the lease's agent, carrying `fencing_token`, XADDed to `cf:reports`."""
    report = make_event(
        TaskFinished, subject=agent_subject(lease.agent_id), subject_seq=1_000_000, producer=f"agent/{lease.agent_id}",
        actor=f"agent:{lease.agent_id}",
        data={"agent_id": lease.agent_id, "lease_id": lease.lease_id, "task_id": lease.task_id,
              "fencing_token": fencing_token, "exit_code": 0},
    )  # fmt: skip
    await system.redis.xadd(REPORTS_STREAM, wire_fields(report))
    return report


def rejection_of(report_id: str):  # -> an async check for wait_for
    async def check(system: RunningSystem) -> dict[str, Any] | None:
        row = await system.pool.fetchrow("SELECT * FROM dispatcher.rejected_reports WHERE report_id = $1", report_id)
        return dict(row) if row else None

    return check


def rejections_from(agent_id: str):  # -> an async check for wait_for
    async def check(system: RunningSystem) -> list[dict[str, Any]] | None:
        rows = await system.pool.fetch(
            "SELECT * FROM dispatcher.rejected_reports WHERE agent_id = $1 AND lease_id IS NOT NULL", agent_id
        )
        return [dict(row) for row in rows] or None

    return check
