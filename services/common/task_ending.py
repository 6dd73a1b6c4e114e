"""Ending a service's own tasks when it stops: cancel, wait, and cancel again any task that ignored it.

A cancel can be lost: Python 3.11's `asyncio.wait_for` (and library code built on it) returns the
awaited result instead of raising when the cancel arrives just as that result does, and the task
then carries on as if nothing happened. A service that cancelled its relay and loops once and then
waited for them could wait forever on such a task (CI saw a service take over 120 s to end after
its cancel). `end_tasks` cancels each task again until it ends, and logs where it was waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from shared.logging import get_logger

log = get_logger(__name__)

RECANCEL_AFTER_S = 5.0
"""How long a cancelled task may take to end before it is cancelled again."""


async def end_tasks(tasks: Sequence[asyncio.Task[None]], recancel_after_s: float = RECANCEL_AFTER_S) -> None:
    """Cancel `tasks` and return once every one has ended (their exceptions are retrieved, not raised)."""
    for task in tasks:
        task.cancel()
    pending = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=recancel_after_s)
        for task in pending:
            log.warning("a task outlived its cancel; cancelling it again", task=task.get_name(), waiting_in=where_it_waits(task))
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def where_it_waits(task: asyncio.Task[object]) -> str:
    """The chain of awaits `task` is suspended in, outermost first (`file:line in function > ...`).

    `Task.get_stack` shows only the outermost frame of a suspended coroutine; this follows each
    coroutine's `cr_await` down to the future it waits on."""
    steps: list[str] = []
    awaitable: object = task.get_coro()
    while awaitable is not None:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None) or getattr(awaitable, "ag_frame", None)
        if frame is None:
            steps.append(repr(awaitable))
            break
        steps.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None) or getattr(awaitable, "ag_await", None)
    return " > ".join(steps)
