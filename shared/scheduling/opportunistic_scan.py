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

from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from collections.abc import Set as AbstractSet

from shared.scheduling.model import PriorityClass, QueuedTask
from shared.scheduling.queue_columns import APPROVED, FLAG_VALUES, MATCHED, OPPORTUNISTIC, READY, WalkColumns
from shared.scheduling.quota import QuotaBook


def passes_readiness(task: QueuedTask, gate: bool) -> bool:
    """True if the task passes `consider`'s readiness checks (`readiness_failure`'s): a match, approval, and its data
    ready where the policy gates on readiness (`gate`)."""
    return bool(task.options) and task.approved and (task.data_ready or not gate)


class OpportunisticScan:
    """The queue's ready opportunistic tasks, read once, in order, only as far as `waits_for` needs.

    With a `quota` book, a task of a project it limits counts only on the card options its quota allows now
    (`QuotaBook.usable_options`): a task its quota refuses on a card type would not borrow that type's GPUs. Other
    tasks count on every option, without a call per task (the scan may read the whole queue). The scan holds the
    book, not the cycle: a reference back to the cycle would keep its working state alive past `plan()` for the
    cyclic collector (measured: +8 ms on the headline)."""

    __slots__ = ("_gate", "_limited", "_narrowest", "_quota", "_spent", "_tasks")

    def __init__(self, queue: Iterable[QueuedTask], gate: bool, quota: QuotaBook | None = None,
                 columns: WalkColumns | None = None) -> None:
        """Given the kept queue's walk columns (in the order of `queue`, then a sequence) the scan jumps from one ready
        opportunistic task to the next at C speed (`_ready_opportunistic`: in a queue without such tasks, or with
        them all at its end, it reads none of the others), and past every task of a shape (GPUs, card types) that
        narrows nothing any more (`_spent`): a queue whose opportunistic work is all wider than the question reads a
        task or two per shape, not every one."""
        self._spent: list[bool] = [False] * len(columns.shape_table) if columns is not None else []
        self._tasks: Iterator[tuple[QueuedTask, int | None]] = (
            zip(queue, repeat(None)) if columns is None
            else _ready_opportunistic(queue, columns, gate, self._spent))  # type: ignore[arg-type]
        self._gate = gate
        self._quota = quota
        self._limited: AbstractSet[str] = quota.projects if quota is not None else frozenset()
        self._narrowest: dict[str, int] = {}  # card type -> fewest GPUs a ready opportunistic task read so far asks

    def waits_for(self, card_type: str, free: int) -> bool:
        """True if a ready opportunistic task in the queue asks for at most `free` GPUs of `card_type`."""
        narrowest = self._narrowest
        if narrowest.get(card_type, free + 1) <= free:
            return True
        gate, opportunistic, limited, spent = self._gate, PriorityClass.OPPORTUNISTIC, self._limited, self._spent
        for task, shape in self._tasks:
            if task.priority_class != opportunistic or not passes_readiness(task, gate):
                continue
            gpus = task.gpus
            options = task.options
            if shape is not None or task.project in limited:
                if all(gpus >= narrowest.get(option.card_type, gpus + 1) for option in options):
                    if shape is not None:  # nor will a later task of its GPUs and card types, whatever its quota allows
                        spent[shape] = True
                    continue  # narrows nothing, whatever its quota allows: no need to ask
                if task.project in limited:
                    options = self._quota.usable_options(task)[0]  # type: ignore[union-attr]
            for option in options:
                if gpus < narrowest.get(option.card_type, gpus + 1):
                    narrowest[option.card_type] = gpus
            if narrowest.get(card_type, free + 1) <= free:
                return True
        return False


def _ready_opportunistic(queue: Sequence[QueuedTask], columns: WalkColumns, gate: bool,
                         spent: list[bool]) -> Iterator[tuple[QueuedTask, int]]:
    """The queue's tasks whose flags say opportunistic and `passes_readiness`, in order, found with `bytes.find`, each
    with its shape number — but those of a shape `spent` (read while the scan reads on)."""
    marks, shapes = bytes(columns.flags).translate(_READY_OPPORTUNISTIC[gate]), columns.shapes
    at = marks.find(1)
    while at >= 0:
        shape = shapes[at]
        if not spent[shape]:
            yield queue[at], shape
        at = marks.find(1, at + 1)


def _marks(gate: bool) -> bytes:
    """A `bytes.translate` table: 1 for the flag values of an opportunistic task that `passes_readiness`, else 0."""
    needed = OPPORTUNISTIC | MATCHED | APPROVED | (READY if gate else 0)
    return bytes((value & needed) == needed if value in FLAG_VALUES else 0 for value in range(256))


_READY_OPPORTUNISTIC = {gate: _marks(gate) for gate in (False, True)}
