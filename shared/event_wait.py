"""Waiting for an `asyncio.Event` with a time limit, without ever losing a cancel.

On Python 3.11, `asyncio.wait_for(event.wait(), timeout)` returns normally when its task is
cancelled just as the event is set: the cancel is lost (CPython gh-86296, fixed in 3.12), and a
loop woken by events — the dispatcher's cycle, an agent's reporter — carries on after its service
was told to end. `asyncio.timeout` counts cancels and never drops one.
"""

from __future__ import annotations

import asyncio


async def wait_until_set(event: asyncio.Event, timeout: float) -> bool:
    """True once `event` is set, False if `timeout` seconds pass first (≤ 0: look once and return)."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
    except TimeoutError:
        return False
    return True
