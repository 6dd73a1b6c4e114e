"""`CommitOrder`: decided steps commit in order; one that did not commit aborts the ones after it."""

from __future__ import annotations

import asyncio

import pytest

from services.dispatcher.commit_order import CommitOrder, StepAborted


async def test_a_step_waits_for_the_one_before_it_and_goes_on_when_it_committed() -> None:
    order = CommitOrder()
    first, second = order.join(tasks={"T1"}), order.join(tasks={"T2"})
    turn = asyncio.ensure_future(order.turn(second))
    await asyncio.sleep(0)
    assert not turn.done() and len(order) == 2
    order.settle(first, committed=True)
    await turn
    order.settle(second, committed=True)
    assert len(order) == 0


async def test_a_step_that_did_not_commit_aborts_every_step_after_it() -> None:
    order = CommitOrder()
    first, second = order.join(), order.join()
    third = order.join()
    order.settle(first, committed=False)
    with pytest.raises(StepAborted):
        await order.turn(second)
    order.settle(second, committed=False)
    with pytest.raises(StepAborted):
        await order.turn(third)


async def test_reading_a_record_waits_only_for_the_pending_steps_that_change_it() -> None:
    order = CommitOrder()
    tasks_step, lease_step = order.join(tasks={"T1"}), order.join(leases={"L1"})
    await order.settled(tasks={"T9"}, leases={"L9"})  # nobody writes these: at once
    reading = asyncio.ensure_future(order.settled(leases={"L1"}))
    order.settle(tasks_step, committed=True)
    await asyncio.sleep(0)
    assert not reading.done()
    order.settle(lease_step, committed=False)
    with pytest.raises(StepAborted):
        await reading


async def test_room_and_drained_wait_for_pending_steps_to_settle() -> None:
    order = CommitOrder()
    first, second = order.join(), order.join()
    room, drained = asyncio.ensure_future(order.room(2)), asyncio.ensure_future(order.drained())
    order.settle(first, committed=True)
    await room
    assert not drained.done()
    order.settle(second, committed=False)
    await drained
