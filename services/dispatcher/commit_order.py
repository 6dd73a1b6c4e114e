"""`CommitOrder`: write steps that have decided commit one after another, in the order they decided.

A write step decides under the step lock (over the working set, which takes its changes at once) and
writes after it, so the next step decides while this one writes and commits. Each decided step joins
the order as `Pending` (with the task and lease ids it changes) and may commit only once the step
before it has committed: if that one did not (its writes failed, its commit failed or is unknown, it
was itself aborted), the step was decided on changes that are not in the tables, and it is aborted
(`StepAborted`: rolled back, nothing of it visible). A step that reads records missing from memory
first waits for the pending steps that changed them (`settled`): the tables hold their old version
until those commit.

An aborted step's batch is decided again at once (`again_if_aborted`): nothing is wrong with it, only with
the step under it, and memory is reloaded from the tables before it decides again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import TypeVar

from shared.logging import get_logger

log = get_logger(__name__)
T = TypeVar("T")

DECIDED_AGAIN_AT_MOST = 2
"""How many times in a row a batch's step aborted under other steps is decided again at once (then the
abort is raised: the batch stays pending for the claimer, as after any failure)."""


class StepAborted(RuntimeError):
    """An earlier write step did not commit; this one, decided on top of it, is rolled back."""


@dataclass(eq=False)
class Pending:
    """A decided step not yet settled: what it changes, and whether it committed (once known)."""

    tasks: frozenset[str]
    leases: frozenset[str]
    after: Pending | None
    committed: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def touches(self, tasks: Collection[str], leases: Collection[str]) -> bool:
        return not (self.tasks.isdisjoint(tasks) and self.leases.isdisjoint(leases))


class CommitOrder:
    """The decided steps not yet settled, oldest first."""

    def __init__(self) -> None:
        self._pending: deque[Pending] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def join(self, tasks: Collection[str] = (), leases: Collection[str] = ()) -> Pending:
        """A step has decided (call under the step lock): it commits after every step that joined before it."""
        pending = Pending(frozenset(tasks), frozenset(leases), self._pending[-1] if self._pending else None)
        self._pending.append(pending)
        return pending

    async def turn(self, pending: Pending) -> None:
        """Wait until the step before `pending` has settled; `StepAborted` unless it committed."""
        if pending.after is not None and not await asyncio.shield(pending.after.committed):
            raise StepAborted("an earlier write step did not commit; this one was decided on top of it")

    def settle(self, pending: Pending, *, committed: bool) -> None:
        """`pending` committed, or did not (then every step after it is aborted)."""
        if not pending.committed.done():
            pending.committed.set_result(committed)
        self._pending.remove(pending)
        pending.after = None  # the chain need not keep settled steps alive

    async def settled(self, tasks: Collection[str] = (), leases: Collection[str] = ()) -> None:
        """Wait until no pending step changes these tasks or leases (before reading them from the tables);
        `StepAborted` if one of them did not commit."""
        for pending in [p for p in self._pending if p.touches(tasks, leases)]:
            if not await asyncio.shield(pending.committed):
                raise StepAborted("a write step this one read after did not commit")

    async def drained(self) -> None:
        """Wait until every pending step has settled (committed or not)."""
        while self._pending:
            await asyncio.shield(self._pending[-1].committed)

    async def room(self, limit: int) -> None:
        """Wait until fewer than `limit` steps are pending."""
        while len(self._pending) >= limit:
            await asyncio.shield(self._pending[0].committed)


async def again_if_aborted(step: Callable[[], Awaitable[T]], times: int = DECIDED_AGAIN_AT_MOST) -> T:
    """Run a write step; if it is aborted (`StepAborted`: a step it was decided on top of did not commit),
    run it again at once, up to `times` more times. The aborted step was rolled back whole, so its batch is
    still to do, and it decides again over memory reloaded from the tables. Without this the batch waited
    for the claimer (`min_idle_ms`, 30 s) when it was one entry, or was applied an entry a transaction."""
    for attempt in range(times):
        try:
            return await step()
        except StepAborted as aborted:
            log.info("write step aborted under a step that did not commit; deciding it again", attempt=attempt + 1,
                     reason=str(aborted))
    return await step()
