"""Fencing, expiry, cancellation and the no-double-booking guarantee, against real servers."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from collections import defaultdict

import asyncpg
import pytest

from shared.settings import Settings
from tests.integration.dispatcher.harness import FAST, DispatcherHarness
from tests.unit.dispatcher.builders import (
    a_ready_task,
    cancel_requested,
    checkpointed,
    finished,
    heartbeat,
    registered,
)

# a takeover gives every lease a grace of one TTL plus the claim interval (shared/leasing/outage.py):
# a short claim interval keeps that grace to 2 s here instead of 31
SHORT_TTL = FAST.model_copy(update={"lease_ttl_s": 1.0, "min_idle_ms": 1000})


async def granted_lease(h: DispatcherHarness, task_id: str, count: int = 1) -> tuple[str, int]:
    grants = [e for e in await h.wait_for_events("lease.granted", count) if e.data.task_id == task_id]
    assert len(grants) >= 1, f"no lease granted for {task_id}"
    return grants[-1].data.lease_id, grants[-1].data.fencing_token


async def one_gpu_for_two_tasks(h: DispatcherHarness) -> tuple[str, int]:
    """A dispatcher, one node of one GPU, tasks T1 and T2 ready: T1's lease (T2 waits for the GPU)."""
    h.start()
    await h.report(registered("a1", "n1", gpus=1))
    await h.publish(*a_ready_task("T1"), *a_ready_task("T2"))
    return await granted_lease(h, "T1")


async def rejections(h: DispatcherHarness) -> list[asyncpg.Record]:
    return await h.fetch("SELECT * FROM dispatcher.rejected_reports ORDER BY id")


async def test_a_report_with_a_stale_fencing_token_is_rejected_logged_and_counted(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=1))
        await h.publish(*a_ready_task("T1"))
        lease_id, token = await granted_lease(h, "T1")

        await h.report(finished("a1", lease_id, "T1", token - 1 if token > 1 else token + 1, exit_code=0),
                       finished("a2", lease_id, "T1", token, exit_code=0))
        assert await h.wait_until(lambda: _count(rejections(h), 2))
        await h.report(heartbeat("a1", "n1", [(lease_id, "T1", token)]))
        await h.wait_for_events("task.started")

        rows = await rejections(h)
        assert [(r["reason"], r["lease_id"]) for r in rows] == [("stale_token", lease_id), ("wrong_agent", lease_id)]
        assert all(r["report_type"] == "report.finished" and r["detail"] for r in rows)
        assert await h.task_state("T1") == "running"  # the refused "finished" reports were never applied
        assert await h.events("task.succeeded") == [] and await h.events("lease.released") == []


async def test_a_run_end_carries_its_lease_end_instead_of_a_lease_released_of_its_own(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        first, token = await one_gpu_for_two_tasks(h)
        await h.report(finished("a1", first, "T1", token, exit_code=0, output_units=5.0))
        second, token = await granted_lease(h, "T2", 2)
        await h.report(finished("a1", second, "T2", token, exit_code=3, error="boom"))
        await h.wait_for_events("task.failed")
        published = await h.events()

    assert [e.type for e in published if e.type == "lease.released"] == []  # no event of its own
    ends = {e.data.task_id: e for e in published if e.type in ("task.succeeded", "task.failed")}
    assert {task: (e.data.released.reason, e.data.released.node_id, e.data.released.gpus)
            for task, e in ends.items()} == {"T1": ("succeeded", "n1", 1), "T2": ("failed", "n1", 1)}  # fmt: skip
    assert [e.data.lease_id for e in await h.events("lease.released")] == [first, second]  # as the events they stand for


async def test_an_expired_lease_requeues_the_task_from_its_last_checkpoint(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        h.start(config=SHORT_TTL)
        await h.report(registered("a1", "n1", gpus=1))
        await h.publish(*a_ready_task("T1"))
        lease_id, token = await granted_lease(h, "T1")
        await h.report(heartbeat("a1", "n1", [(lease_id, "T1", token)]),
                       checkpointed("a1", lease_id, "T1", token, "s3://ckpt/T1/step-100"))
        # ... then the agent goes silent: the lease expires and the silent node is lost with it,
        expired = await h.wait_for_events("lease.expired")
        lost = await h.wait_for_events("node.lost")
        requeued = await h.wait_for_events("task.requeued")
        released = await h.wait_for_events("lease.released")
        await asyncio.sleep(0.5)  # several cycles: the task must not go straight back to the dead node
        not_regranted = len(await h.events("lease.granted")) == 1
        # ... until the agent is heard from again: then the task is granted again, from its checkpoint
        await h.report(heartbeat("a1", "n1", []))
        await h.wait_for_events("lease.granted", 2)
        grants = await h.events("lease.granted")
        commands = await h.commands("a1")

        # the old run's failure, too late (a clean finish would be reconciled: tests/reliability/test_report_path_outage.py)
        await h.report(finished("a1", lease_id, "T1", token, exit_code=1))
        assert await h.wait_until(lambda: _count(rejections(h), 1))
        assert [r["reason"] for r in await rejections(h)] == ["lease_ended"]
        # an agent that still heartbeats the ended lease is told to stop that run, once
        await h.report(heartbeat("a1", "n1", [(lease_id, "T1", token)]), heartbeat("a1", "n1", [(lease_id, "T1", token)]))
        assert await h.wait_until(lambda: _count(rejections(h), 3))
        stops = [c for c in await h.wait_for_commands("a1", 3) if c.type == "command.revoke"]

    assert [e.data.lease_id for e in expired] == [lease_id]
    assert [e.data.node_id for e in lost] == ["n1"] and not_regranted
    assert [(e.data.reason, e.data.resume_from) for e in requeued] == [("lease_expired", "s3://ckpt/T1/step-100")]
    assert [(e.data.lease_id, e.data.reason) for e in released][:1] == [(lease_id, "expired")]
    assert grants[1].data.resume_from == "s3://ckpt/T1/step-100" and grants[1].data.fencing_token > token
    assert commands[-1].data.resume_from == "s3://ckpt/T1/step-100"
    assert [(c.data.lease_id, c.data.fencing_token, c.data.reason) for c in stops] == [(lease_id, token, "superseded")]


async def test_a_run_whose_reports_are_read_late_is_charged_until_it_ended_not_until_they_were_read(
    fresh_settings: Settings,
) -> None:
    # The run's last heartbeat and its finish wait in cf:reports while no dispatcher reads them (here:
    # none runs; in production, one behind after an outage). The heartbeat is applied only after the run's
    # end, yet it proves the lease held only until it reached the stream: charged until the finish.
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=1))
        await h.publish(*a_ready_task("T1"))
        lease_id, token = await granted_lease(h, "T1")
        await h.report(heartbeat("a1", "n1", [(lease_id, "T1", token)]))
        await h.wait_for_events("task.started")
        await h.stop()

        await h.report(heartbeat("a1", "n1", [(lease_id, "T1", token)]))
        await asyncio.sleep(0.5)
        finish = finished("a1", lease_id, "T1", token, exit_code=0)
        await h.report(finish)
        await asyncio.sleep(1.5)  # read well after the run ended
        h.start("b")

        [released] = await h.wait_for_events("lease.released")
        assert released.data.ended_at == finish.occurred_at, "charged until the late heartbeat was applied"
        assert released.occurred_at - finish.occurred_at >= timedelta(seconds=1.5)
        [row] = await h.leases("T1")
        assert row["ended_at"] == finish.occurred_at and row["last_heard_at"] < finish.occurred_at


async def test_cancel_of_a_queued_task_and_of_a_leased_task(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings) as h:
        lease_id, token = await one_gpu_for_two_tasks(h)
        assert await h.wait_until(lambda: _state_is(h, "T2", "queued"))  # T2 waits: the only GPU is T1's

        await h.publish(cancel_requested("T2"), cancel_requested("T1"))
        revoke = [c for c in await h.wait_for_commands("a1", 2) if c.type == "command.revoke"]
        assert await h.wait_until(lambda: _state_is(h, "T2", "cancelled"))
        assert await h.task_state("T1") == "leased"  # cancelled only once the agent stopped it
        await h.report(finished("a1", lease_id, "T1", token, exit_code=143))
        cancelled = await h.wait_for_events("task.cancelled", 2)
        released = await h.wait_for_events("lease.released")
        assert await h.leases("T2") == []

    assert [(c.data.lease_id, c.data.reason) for c in revoke] == [(lease_id, "cancelled")]
    assert sorted((e.data.task_id, e.data.lease_id) for e in cancelled) == [("T1", lease_id), ("T2", None)]
    assert [(e.data.lease_id, e.data.reason) for e in released] == [(lease_id, "cancelled")]


async def test_no_gpu_is_leased_twice(fresh_settings: Settings) -> None:
    """Many tasks through a 2-GPU node: the event log shows no overlapping leases per GPU, and the
    database itself refuses a second active lease of a GPU."""
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=2))
        for n in range(6):
            await h.publish(*a_ready_task(f"T{n}", gpus=1 + n % 2))
        finished_leases: set[str] = set()
        while len(finished_leases) < 6:
            assert await h.wait_until(lambda: _new_grant(h, "a1", finished_leases)), "no further grant"
            for command in await h.commands("a1"):
                if command.data.lease_id not in finished_leases:
                    finished_leases.add(command.data.lease_id)
                    await h.report(finished("a1", command.data.lease_id, command.data.task_id,
                                            command.data.fencing_token, exit_code=0))
        await h.wait_for_events("task.succeeded", 6)
        released = await h.wait_for_events("lease.released", 6)
        grants = await h.events("lease.granted")

        assert _overlaps(grants, released) == []
        with pytest.raises(asyncpg.UniqueViolationError):
            await _double_book(h)


async def _double_book(h: DispatcherHarness) -> None:
    assert h.pool is not None
    async with h.pool.acquire() as conn, conn.transaction():
        lease = await conn.fetchrow("SELECT * FROM dispatcher.leases ORDER BY granted_at LIMIT 1")
        await conn.execute(
            "INSERT INTO dispatcher.leases (lease_id, task_id, run, node_id, agent_id, card_type, gpu_indices,"
            " fencing_token, granted_at, ttl_s, expires_at, estimated_end)"
            " VALUES ('X1', 'TX', 1, 'n1', 'a1', 'H100', '{0}', 999999, now(), 30, now(), now()),"
            " ('X2', 'TX', 1, 'n1', 'a1', 'H100', '{0}', 1000000, now(), 30, now(), now())"
        )
        assert lease is not None
        await conn.execute("INSERT INTO dispatcher.lease_gpus (lease_id, node_id, gpu_index) VALUES"
                           " ('X1', 'n1', 0), ('X2', 'n1', 0)")


def _overlaps(grants: list, released: list) -> list[tuple[str, int]]:
    """(node, gpu) pairs whose lease intervals [granted, released) overlap in the event log."""
    ends = {e.data.lease_id: e.data.ended_at for e in released}
    intervals: dict[tuple[str, int], list] = defaultdict(list)
    for grant in grants:
        for gpu in grant.data.gpu_indices:
            intervals[(grant.data.node_id, gpu)].append((grant.occurred_at, ends[grant.data.lease_id]))
    bad = []
    for key, spans in intervals.items():
        spans.sort()
        if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])):
            bad.append(key)
    return bad


async def _new_grant(h: DispatcherHarness, agent_id: str, seen: set[str]) -> bool:
    return any(c.data.lease_id not in seen for c in await h.commands(agent_id))


async def _state_is(h: DispatcherHarness, task_id: str, state: str) -> bool:
    return await h.task_state(task_id) == state


async def _count(rows_coroutine, n: int) -> bool:  # noqa: ANN001
    return len(await rows_coroutine) >= n


