"""Whether a ready opportunistic task would borrow a pool's free GPUs, read lazily from the queue (pure).

With `policy.fillers_after_opportunistic` a standard filler takes headroom GPUs only where no ready opportunistic
task the pool's free GPUs could hold waits (`TaskStart._fills_headroom`): that one would borrow them instead. The
answer needs the narrowest such task per card type, but only as far as the question asks: the scan reads the queue
in order and stops at the first task that settles it, keeping what it read for the next question of the cycle
(the narrowest widths only shrink as it reads on, so an answer once yes stays yes). A cycle over 100,000 queued
tasks asks about one or two pools; reading the whole queue for them cost ≈64 ms of a 230 ms first plan
(docs/BENCHMARKS.md, scale session 22b).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.scheduling.model import PriorityClass, QueuedTask


def passes_readiness(task: QueuedTask, gate: bool) -> bool:
    """True if the task passes `consider`'s readiness checks (`readiness_failure`'s): a match, approval, and its data
    ready where the policy gates on readiness (`gate`)."""
    return bool(task.options) and task.approved and (task.data_ready or not gate)


class OpportunisticScan:
    """The queue's ready opportunistic tasks, read once, in order, only as far as `waits_for` needs."""

    __slots__ = ("_gate", "_narrowest", "_tasks")

    def __init__(self, queue: Iterable[QueuedTask], gate: bool) -> None:
        self._tasks = iter(queue)
        self._gate = gate
        self._narrowest: dict[str, int] = {}  # card type -> fewest GPUs a ready opportunistic task read so far asks

    def waits_for(self, card_type: str, free: int) -> bool:
        """True if a ready opportunistic task in the queue asks for at most `free` GPUs of `card_type`."""
        narrowest = self._narrowest
        if narrowest.get(card_type, free + 1) <= free:
            return True
        gate, opportunistic = self._gate, PriorityClass.OPPORTUNISTIC
        for task in self._tasks:
            if task.priority_class != opportunistic or not passes_readiness(task, gate):
                continue
            gpus = task.gpus
            for option in task.options:
                if gpus < narrowest.get(option.card_type, gpus + 1):
                    narrowest[option.card_type] = gpus
            if narrowest.get(card_type, free + 1) <= free:
                return True
        return False
