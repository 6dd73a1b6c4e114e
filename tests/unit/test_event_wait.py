"""`wait_until_set`: an event wait with a time limit that never loses its task's cancel."""

from __future__ import annotations

import asyncio

import pytest

from shared.event_wait import wait_until_set


async def test_it_tells_whether_the_event_was_set_in_time() -> None:
    event = asyncio.Event()
    assert await wait_until_set(event, 0.01) is False
    assert await wait_until_set(event, 0) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_until_set(event, 10) is True
    assert await wait_until_set(event, -1) is True  # already set: no waiting at all


async def test_a_cancel_that_arrives_as_the_event_is_set_is_not_lost() -> None:
    """Python 3.11's `asyncio.wait_for(event.wait(), t)` returns normally here and the task carries on."""
    event = asyncio.Event()
    carried_on: list[bool] = []

    async def loop_woken_by_the_event() -> None:
        await wait_until_set(event, 10)
        carried_on.append(True)

    task = asyncio.create_task(loop_woken_by_the_event())
    await asyncio.sleep(0.01)
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert carried_on == []
