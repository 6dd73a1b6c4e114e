"""`StepLock`: the leader's one-write-step-at-a-time lock, where a cycle goes before waiting batches.

Every write step (a batch of events, a batch of reports, a cycle, the sweep) holds the lock for
its transaction. On a busy report path several batches may be waiting when a cycle is woken, and
with a plain FIFO lock the cycle, which turns queued tasks into grants, would wait behind all of
them. Urgent acquirers (the cycle) are served before the others; each kind keeps its own order,
and a cycle runs at most once per wake-up, so the batches are delayed by at most one cycle each
time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class StepLock:
    """An asyncio lock whose urgent waiters are handed it before the ordinary ones (FIFO within each)."""

    def __init__(self) -> None:
        self._held = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._ordinary: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._held

    @contextlib.asynccontextmanager
    async def hold(self, *, urgent: bool = False) -> AsyncIterator[None]:
        await self.acquire(urgent=urgent)
        try:
            yield
        finally:
            self.release()

    async def acquire(self, *, urgent: bool = False) -> None:
        if not self._held and not self._urgent and not self._ordinary:
            self._held = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._ordinary
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed the lock just as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):  # release may have skipped and dropped it already
                    queue.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the lock to the next waiter (urgent first), or free it."""
        if not self._held:
            raise RuntimeError("StepLock released while not held")
        for queue in (self._urgent, self._ordinary):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the lock stays held: it passes to this waiter
                    return
        self._held = False
