"""A service's tasks end when it stops, even one that ignored its first cancel."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from services.common.task_ending import end_tasks, where_it_waits


async def _ignores_its_first_cancel(ignored: list[str]) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        ignored.append("cancel")  # as a cancel lost inside asyncio.wait_for: carry on
    await asyncio.sleep(3600)


async def test_a_task_that_ignored_its_cancel_is_cancelled_again_and_named_in_a_warning() -> None:
    ignored: list[str] = []
    stubborn = asyncio.create_task(_ignores_its_first_cancel(ignored), name="svc:stubborn")
    obedient = asyncio.create_task(asyncio.sleep(3600), name="svc:obedient")
    await asyncio.sleep(0)
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(end_tasks([stubborn, obedient], recancel_after_s=0.05), timeout=10)
    assert stubborn.cancelled() and obedient.cancelled()
    assert ignored == ["cancel"]
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [entry["task"] for entry in warnings] == ["svc:stubborn"]
    assert "_ignores_its_first_cancel" in warnings[0]["waiting_in"]


async def test_a_failed_task_does_not_stop_the_others_from_being_ended() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    waiting = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    await end_tasks([failed, waiting])
    assert isinstance(failed.exception(), RuntimeError) and waiting.cancelled()


async def test_where_it_waits_follows_the_awaits_down_to_the_innermost_one() -> None:
    async def inner() -> None:
        await asyncio.Event().wait()

    async def outer() -> None:
        await inner()

    task = asyncio.create_task(outer())
    await asyncio.sleep(0)
    chain = where_it_waits(task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    functions = [step.rsplit(" in ", 1)[-1] for step in chain.split(" > ") if " in " in step]
    assert functions[:3] == ["outer", "inner", "wait"]
