"""Headroom: the share of each card type that `standard` work may never take.

`policy.headroom` is a share (0..1) for every card type, or a mapping card type -> share (types not
named have none). The headroom of a type is floor(share x its total GPUs). Core work uses the headroom
at once; opportunistic work may borrow it (and is the first to be preempted when core work arrives).
So the headroom is kept as long as its GPUs are free *or borrowed*: a standard task takes only free
GPUs, and may start on a type only if the free GPUs plus the GPUs held by opportunistic work of that
type stay at or above the headroom afterwards. `Borrowed` counts the latter during one cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from shared.scheduling.model import Policy, PriorityClass, RunningLease


def headroom_share(policy: Policy, card_type: str) -> float:
    """The share of `card_type` kept free for core work."""
    share = policy.headroom
    if isinstance(share, (int, float)):
        return float(share)
    return float(share.get(card_type, 0.0))


def headroom_gpus(policy: Policy, card_type: str, total_gpus: int) -> int:
    """How many GPUs of the type standard work must leave free: floor(share x total)."""
    share = headroom_share(policy, card_type)
    if share <= 0:
        return 0
    # The small epsilon keeps exact products (0.7 x 10 = 6.999999999999999) from rounding down.
    return min(total_gpus, math.floor(share * total_gpus + 1e-9))


def blocked_by_headroom(priority_class: PriorityClass, gpus: int, free_gpus: int, headroom: int,
                        borrowed: int = 0) -> bool:
    """True if the GPUs are free but taking them would eat into the headroom (standard work only).

    The headroom is intact while free + `borrowed` (GPUs held by preemptible opportunistic work)
    GPUs cover it. A task asking for more GPUs than are free is blocked by capacity, not headroom.
    """
    if headroom <= 0 or priority_class != PriorityClass.STANDARD or gpus > free_gpus:
        return False
    return free_gpus + borrowed - gpus < headroom


class Borrowed:
    """GPUs of each card type held by opportunistic work during one cycle (headroom it borrowed).

    Counted from the running opportunistic leases on first use (many cycles never need it), plus the
    opportunistic grants of this cycle, minus the GPUs of leases preempted in this cycle.
    """

    def __init__(self, leases: Iterable[RunningLease], card_of_node: Callable[[str], str | None]) -> None:
        self._leases, self._card_of_node = leases, card_of_node
        self._counted: dict[str, int] | None = None
        self._changes: dict[str, int] = {}

    def of(self, card_type: str) -> int:
        """GPUs of the card type opportunistic work holds now."""
        if self._counted is None:
            self._counted = self._count_leases()
        return self._counted.get(card_type, 0) + self._changes.get(card_type, 0)

    def change(self, card_type: str, gpus: int) -> None:
        """Opportunistic work took (`gpus` > 0) or gave back (`gpus` < 0) GPUs of the card type."""
        self._changes[card_type] = self._changes.get(card_type, 0) + gpus

    def _count_leases(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for lease in self._leases:
            card_type = self._card_of_node(lease.node_id)
            if card_type is not None and lease.priority_class == PriorityClass.OPPORTUNISTIC:
                counted[card_type] = counted.get(card_type, 0) + lease.gpus
        return counted
