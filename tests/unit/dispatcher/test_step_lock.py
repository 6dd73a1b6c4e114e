"""`StepLock`: urgent waiters go first, FIFO within each kind, cancellation never loses the lock."""

from __future__ import annotations

import asyncio

import pytest

from services.dispatcher.step_lock import StepLock


async def _queue_up(lock: StepLock, order: list[str], name: str, *, urgent: bool) -> None:
    async with lock.hold(urgent=urgent):
        order.append(name)
        await asyncio.sleep(0)


async def _waiters(lock: StepLock, names: list[tuple[str, bool]], order: list[str]) -> list[asyncio.Task[None]]:
    tasks = []
    for name, urgent in names:
        tasks.append(asyncio.create_task(_queue_up(lock, order, name, urgent=urgent)))
        await asyncio.sleep(0)  # each reaches its wait before the next one starts
    return tasks


async def test_an_urgent_waiter_is_served_before_ordinary_ones_that_came_first() -> None:
    lock, order = StepLock(), []
    await lock.acquire()
    tasks = await _waiters(lock, [("batch-1", False), ("batch-2", False), ("cycle", True), ("batch-3", False),
                                  ("sweep", True)], order)
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["cycle", "sweep", "batch-1", "batch-2", "batch-3"]
    assert not lock.locked()


async def test_a_free_lock_is_taken_at_once_and_released_for_good() -> None:
    lock = StepLock()
    async with lock.hold(urgent=True):
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()


async def test_a_cancelled_waiter_neither_gets_nor_loses_the_lock() -> None:
    lock, order = StepLock(), []
    await lock.acquire()
    tasks = await _waiters(lock, [("gone", True), ("next", False)], order)
    tasks[0].cancel()
    await asyncio.sleep(0)
    lock.release()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == ["next"]
    assert not lock.locked()


async def test_a_waiter_cancelled_after_being_handed_the_lock_passes_it_on() -> None:
    lock, order = StepLock(), []
    await lock.acquire()
    tasks = await _waiters(lock, [("handed", True), ("next", False)], order)
    lock.release()  # the lock passes to "handed" ...
    tasks[0].cancel()  # ... which is cancelled before it runs
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == ["next"]
    assert not lock.locked()
