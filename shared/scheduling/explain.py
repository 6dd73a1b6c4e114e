"""Why a task did not start: pick the most telling reason among its card options and say it.

`Miss` records why one card option did not take a task; `Explainer` turns the misses into a
deferral reason and a sentence that carries the numbers a person needs ("needs 4 GPUs of H100 on one node;
largest free block: H100 3"). Sentences that depend only on the fleet's free capacity are cached
until a grant or hold changes one of their card types: late in a busy cycle thousands of tasks are told
the same thing, and early in it most grants leave a task's card types alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from shared.scheduling import reasons
from shared.scheduling.backfill import ReservationGuard
from shared.scheduling.headroom import Borrowed, headroom_needed
from shared.scheduling.model import CardOption, Deferral, DeferralReason, QueuedTask, enum_members
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.placement import Fleet, Pool

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
_CARD_TYPE = attrgetter("card_type")
# When card options fail differently, the deferral names the most telling reason (first here).
_REASON_RANK = {R.BEHIND_RESERVATION: 0, R.HEADROOM: 1, R.HEAVY_SPREAD: 2, R.NO_CAPACITY: 3}


@dataclass(frozen=True, slots=True)
class Miss:
    """Why one card option did not take the task."""

    reason: DeferralReason
    option: CardOption
    pool: Pool | None  # None: the card type is not in the fleet at all

    @property
    def rank(self) -> tuple[int, bool]:
        return (_REASON_RANK[self.reason], self.pool is None)


def most_telling(misses: Sequence[Miss]) -> Miss:
    return min(misses, key=lambda miss: miss.rank)


class Explainer:
    """Deferral sentences for one cycle, with a cache keyed by the fleet's free capacity."""

    def __init__(self, fleet: Fleet, policy: Policy, now: float, borrowed: Borrowed) -> None:
        self._fleet, self._policy, self._now, self._borrowed = fleet, policy, now, borrowed
        # (GPUs, heavy, card types) -> [the fleet's free GPUs, `_free_of` the card types, sentence]
        self._cache: dict[tuple, list] = {}
        self._no_room: dict[tuple, list] = {}  # the same for `no_capacity`
        self._never: dict[tuple, str | None] = {}  # (GPUs, card types) -> `never_fits` (pool sizes do not change)
        # (card type, heavy) -> (the pool's free GPUs then, `Fleet.largest_free` then): a pool's free GPUs only
        # shrink during a cycle, and every change of its nodes' free or heavy counts shrinks them
        self._largest: dict[tuple[str, bool], tuple[int, int]] = {}
        self._pools_said: dict[tuple, tuple[tuple[str, ...], bool]] = {}  # (GPUs, card types) -> `_pools_to_say`
        # (GPUs, card types named, their largest free blocks) -> the single-node NO_CAPACITY sentence
        self._single_texts: dict[tuple, str] = {}

    def deferral(self, task: QueuedTask, miss: Miss, misses: Sequence[Miss], guard: ReservationGuard | None,
                 wide: bool = False) -> Deferral:
        """`wide`: the headroom asks the task to leave only the rest of the type free (headroom.py)."""
        return Deferral(task.task_id, miss.reason, self._detail(task, miss, misses, guard, wide))

    def no_capacity(self, task: QueuedTask, options: Sequence[CardOption]) -> str:
        """The NO_CAPACITY sentence for a task none of whose card options has room (checked by the caller)."""
        return self.no_capacity_of((task.gpus, task.heavy, tuple(map(_CARD_TYPE, options))))

    def no_capacity_of(self, shape: tuple[int, bool, tuple[str, ...]]) -> str:
        """`no_capacity` of a task of this (GPUs, heavy, card types of its options in matcher order): all it reads
        of the task (the settled walk passes a kept queue's shape, without reading the task)."""
        cached = self._no_room.get(shape)
        if cached is None or (cached[0] != self._fleet.free_total and not self._still_holds(cached, shape[2])):
            never = (shape[0], shape[2])
            if never not in self._never:
                self._never[never] = self._never_fits_of(shape[0], shape[2])
            text = self._never[never]
            if text is None:
                text = self._capacity_text_of(*shape)
            cached = self._no_room[shape] = [self._fleet.free_total, self._free_of(shape[2]), text]
        return cached[2]

    def _free_of(self, card_types: Sequence[str]) -> tuple[int, ...]:
        """Free GPUs of each of these card types (-1: not in the fleet)."""
        pools = self._fleet.pools
        return tuple([pools[card].free_total if card in pools else -1 for card in card_types])

    def _still_holds(self, cached: list, card_types: Sequence[str]) -> bool:
        """True if a capacity sentence cached as [fleet's free GPUs, `_free_of` its card types, text]
        when the fleet had other free GPUs is still true: none of its card types changed. Free GPUs
        only shrink during a cycle, so a card type with as many free GPUs as then had no grant or hold
        (its nodes' free and heavy counts, which the sentence reports, are as they were)."""
        if cached[1] != self._free_of(card_types):
            return False
        cached[0] = self._fleet.free_total
        return True

    def never_fits(self, task: QueuedTask, options: Sequence[CardOption]) -> str | None:
        """The NO_CAPACITY sentence saying so if the task asks for more GPUs than any option's card type
        has (the headroom never keeps a task out for good: see `headroom.headroom_needed`). Kept per (GPUs, card
        types), as `no_capacity_of` keeps it: every blocked task asks."""
        never = (task.gpus, tuple(map(_CARD_TYPE, options)))
        text = self._never.get(never, self)  # `self`: not asked yet (None is an answer)
        if text is self:
            text = self._never[never] = self._never_fits_of(*never)
        return text

    def _never_fits_of(self, gpus: int, card_types: Sequence[str]) -> str | None:
        """`never_fits` of a task of `gpus` GPUs with options of these card types."""
        pools = [pool for card_type in card_types if (pool := self._fleet.pools.get(card_type))]
        limits = [(pool.card_type, pool.total_gpus) for pool in pools]
        if not limits or any(gpus <= limit for _, limit in limits):
            return None
        return reasons.never_fits(gpus, limits)

    def _detail(self, task: QueuedTask, miss: Miss, misses: Sequence[Miss], guard: ReservationGuard | None,
                wide: bool) -> str:
        option, pool = miss.option, miss.pool
        if miss.reason == R.HEADROOM:
            # Standard work may take the free GPUs beyond the headroom not covered by borrowed ones.
            needed = headroom_needed(task.gpus, pool.headroom, pool.total_gpus, wide)
            covered = min(needed, self._borrowed.of(pool.card_type))
            return reasons.headroom(task.gpus, option.card_type, pool.free_total - (needed - covered), needed)
        if miss.reason == R.BEHIND_RESERVATION:
            start_in = guard.start_at - self._now
            return reasons.behind_reservation(guard.holder, guard.card_type, start_in, option.runtime_s)
        if miss.reason == R.HEAVY_SPREAD:
            return reasons.heavy_spread(task.gpus, option.card_type, self._policy.max_heavy_per_node)
        key = (task.gpus, task.heavy, tuple([item.option.card_type for item in misses]))
        cached = self._cache.get(key)
        if cached is None or (cached[0] != self._fleet.free_total and not self._still_holds(cached, key[2])):
            cached = self._cache[key] = [self._fleet.free_total, self._free_of(key[2]), self._capacity_text(task, misses)]
        return cached[2]

    def _capacity_text(self, task: QueuedTask, misses: Sequence[Miss]) -> str:
        return self._capacity_text_of(task.gpus, task.heavy, tuple([item.option.card_type for item in misses]))

    def _capacity_text_of(self, gpus: int, heavy: bool, card_types: Sequence[str]) -> str:
        """The NO_CAPACITY sentence of a task of `gpus` GPUs (`heavy`) that found no room on these card types."""
        pools = self._fleet.pools
        which = self._pools_said.get((gpus, card_types))
        if which is None:
            which = self._pools_said[(gpus, card_types)] = self._pools_to_say(gpus, card_types)
        cards, spans = which
        if not cards:
            return reasons.not_in_fleet(list(card_types))
        if spans:
            return reasons.no_capacity_span(gpus, cards, [(card, pools[card].free_total) for card in cards])
        largest = tuple([self._largest_free(pools[card], heavy) for card in cards])
        text = self._single_texts.get((gpus, cards, largest))
        if text is None:
            text = self._single_texts[(gpus, cards, largest)] = reasons.no_capacity(gpus, cards, list(zip(cards, largest)))
        return text

    def _pools_to_say(self, gpus: int, card_types: Sequence[str]) -> tuple[tuple[str, ...], bool]:
        """The card types a capacity sentence names (those in the fleet) and whether the task must span nodes on
        every one of them — both fixed for the cycle (pools keep their card types and node sizes)."""
        pools = self._fleet.pools
        cards = tuple([card for card in card_types if card in pools])
        return cards, all(gpus > pools[card].max_node_gpus for card in cards)

    def _largest_free(self, pool: Pool, heavy: bool) -> int:
        """`Fleet.largest_free`, asked again only once the pool's free GPUs moved, and then from the block it had
        (a pool's largest free block only shrinks during a cycle)."""
        known = self._largest.get((pool.card_type, heavy))
        if known is None or known[0] != pool.free_total:
            at_most = None if known is None else known[1]
            known = self._largest[(pool.card_type, heavy)] = (pool.free_total,
                                                              self._fleet.largest_free(pool, heavy, at_most))
        return known[1]
