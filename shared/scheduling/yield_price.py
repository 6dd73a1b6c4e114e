"""Whether a standard lease's yield pays (`Policy.standard_yields_priced`): the core task's wait against the restart.

A standard lease that checkpoints and yields to a core task (`Policy.checkpointing_standard_yields`) loses only its
checkpoint write; what the yield costs is its restart — requeued, its task must find all its GPUs free at once again,
and GPUs idle while the reservation for it drains. So a yield is priced in GPU-time, both sides estimated from the
cycle's snapshot alone (free GPUs now and the leases' estimated ends, `HoleTimes`; no queue):

- what it saves: the core task's GPUs × its wait for a hole of that many GPUs on the card type without preempting;
- what it costs: the victim's width (its task's GPUs over all its leases) × its wait for a hole of that width on the
  card type, its own node left out (the core task takes it).

The yield is taken only when it saves more than it costs (`yield_pays`). An as-wide victim then never yields: it
would wait for the same hole the core task would have waited for — the yield only swaps who waits. A narrower one
yields when its smaller hole comes sooner enough; a wider one only when the core task would otherwise wait long.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shared.scheduling.model import RunningLease
from shared.scheduling.placement import Fleet

NEVER = float("inf")


@dataclass(frozen=True, slots=True)
class Hole:
    """When a hole of some GPU count opens on a card type: the earliest node, and the earliest on any other node."""

    at: float
    rank: int | None  # the node of `at` (None: the hole spans nodes, or there is none)
    elsewhere: float  # the earliest hole on a node other than `rank`

    def wait(self, now: float, excluding: int | None = None) -> float:
        """Seconds from `now` until the hole opens (on a node other than `excluding`, if given)."""
        at = self.elsewhere if excluding is not None and excluding == self.rank else self.at
        return max(0.0, at - now)


class HoleTimes:
    """When `gpus` GPUs come free at once on a card type, from the fleet's free GPUs now and the estimated ends of
    the given leases (a lease past its estimate counts as ending now). Per node for a task that fits one node, over
    the whole card type for one that spans nodes. Computed once per (card type, GPU count) and cycle."""

    def __init__(self, leases: Iterable[RunningLease], fleet: Fleet, now: float) -> None:
        self._fleet, self._now = fleet, now
        self._ends: dict[int, list[tuple[float, int]]] = {}  # rank -> (end, GPUs) of its leases
        rank_of = fleet.rank_of
        for lease in leases:
            rank = rank_of.get(lease.node_id)
            if rank is not None:
                self._ends.setdefault(rank, []).append((max(now, lease.estimated_end), lease.gpus))
        self._holes: dict[tuple[str, int], Hole] = {}

    def wait(self, card_type: str, gpus: int, excluding: int | None = None) -> float:
        """Seconds until `gpus` GPUs are free at once on the card type (on a node other than `excluding`)."""
        key = (card_type, gpus)
        hole = self._holes.get(key)
        if hole is None:
            hole = self._holes[key] = self._hole(card_type, gpus)
        return hole.wait(self._now, excluding)

    def _hole(self, card_type: str, gpus: int) -> Hole:
        pool = self._fleet.pools.get(card_type)
        if pool is None:
            return Hole(NEVER, None, NEVER)
        if gpus > pool.max_node_gpus:
            return Hole(self._opens_at(pool.ranks, gpus), None, NEVER)
        best, best_rank, second = NEVER, None, NEVER
        for rank in pool.ranks:
            at = self._opens_at((rank,), gpus)
            if at < best:
                best, best_rank, second = at, rank, best
            elif at < second:
                second = at
        return Hole(best, best_rank, second)

    def _opens_at(self, ranks: Iterable[int], gpus: int) -> float:
        """The earliest time the nodes hold `gpus` free GPUs together (NEVER: not even once every lease ends)."""
        free, ends = 0, []
        for rank in ranks:
            free += self._fleet.free_count[rank]
            ends.extend(self._ends.get(rank, ()))
        if free >= gpus:
            return self._now
        for end, count in sorted(ends):
            free += count
            if free >= gpus:
                return end
        return NEVER


def yield_pays(holes: HoleTimes, card_type: str, core_gpus: int, victim_width: int, victim_rank: int) -> bool:
    """True if the core task's GPUs × its wait for a hole without preempting exceed the victim's width × its wait for
    a hole of its width once the core task holds its node (module docstring)."""
    saved = core_gpus * holes.wait(card_type, core_gpus)
    return saved > victim_width * holes.wait(card_type, victim_width, excluding=victim_rank)
