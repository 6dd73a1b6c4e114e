"""Headroom: the share of each card type that `standard` work may never take.

`policy.headroom` is a share (0..1) for every card type, or a mapping card type -> share (types not
named have none). The headroom of a type is ceil(share x its total GPUs). A standard task may start on
a type only if the free GPUs of that type stay at or above the headroom afterwards; core work uses the
headroom at once; opportunistic work may borrow it (and is the first to be preempted when core work
arrives).
"""

from __future__ import annotations

import math

from shared.scheduling.model import Policy, PriorityClass


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


def blocked_by_headroom(priority_class: PriorityClass, gpus: int, free_gpus: int, headroom: int) -> bool:
    """True if the GPUs are free but taking them would eat into the headroom (standard work only).

    A task asking for more GPUs than are free is not blocked by headroom but by capacity.
    """
    if headroom <= 0 or priority_class != PriorityClass.STANDARD or gpus > free_gpus:
        return False
    return free_gpus - gpus < headroom
