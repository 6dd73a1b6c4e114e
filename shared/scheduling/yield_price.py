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

`HoleTimes` also answers what yield_drain.py (`Policy.standard_yields_drain_priced`) asks: when a hole opens on one
node whose free GPUs and ends a yield changes (`opens_on`), and on which node a requeued victim restarts
(`restart_node`). It reads the free GPUs when it is made and counts the ends of the cycle's grants and holds it is
given (`releases`): GPUs granted earlier in the cycle come free again at their grant's estimated end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shared.scheduling.model import RunningLease
from shared.scheduling.placement import Fleet

NEVER = float("inf")

Ends = Sequence[tuple[float, int]]  # (estimated end, GPUs) of what holds a node's GPUs now


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
    """When `gpus` GPUs come free at once on a card type, from the fleet's free GPUs when it is made, the estimated
    ends of the given leases (a lease past its estimate counts as ending now) and of the cycle's `releases` (grants
    and holds: anything with `at`, `rank`, `gpus` first, as `backfill.Release`). Per node for a task that fits one
    node, over the whole card type for one that spans nodes. Computed once per (card type, GPU count)."""

    def __init__(self, leases: Iterable[RunningLease], fleet: Fleet, now: float,
                 releases: Iterable[tuple] = ()) -> None:
        self.fleet, self.now = fleet, now
        self.free: list[int] = list(fleet.free_count)  # as it is now: the cycle's later grants do not change it
        self.ends: dict[int, list[tuple[float, int]]] = {}  # rank -> (end, GPUs) of its leases
        rank_of = fleet.rank_of
        for lease in leases:
            rank = rank_of.get(lease.node_id)
            if rank is not None:
                self.ends.setdefault(rank, []).append((max(now, lease.estimated_end), lease.gpus))
        for at, rank, gpus, *_ in releases:
            self.ends.setdefault(rank, []).append((max(now, at), gpus))
        self._holes: dict[tuple[str, int], Hole] = {}

    def wait(self, card_type: str, gpus: int, excluding: int | None = None) -> float:
        """Seconds until `gpus` GPUs are free at once on the card type (on a node other than `excluding`)."""
        return self.hole(card_type, gpus).wait(self.now, excluding)

    def hole(self, card_type: str, gpus: int) -> Hole:
        key = (card_type, gpus)
        hole = self._holes.get(key)
        if hole is None:
            hole = self._holes[key] = self._hole(card_type, gpus)
        return hole

    def opens_on(self, rank: int, gpus: int, free: int | None = None, ends: Ends | None = None) -> float:
        """When `gpus` GPUs are free at once on one node: as it is, or with these free GPUs and ends instead."""
        return _opens_at(self.free[rank] if free is None else free,
                         self.ends.get(rank, ()) if ends is None else ends, gpus, self.now)

    def opens_on_pool(self, card_type: str, gpus: int, changed: dict[int, tuple[int, Ends]] | None = None) -> float:
        """When `gpus` GPUs are free at once over the card type's nodes, some of them (`changed`: rank -> free GPUs,
        ends) changed."""
        pool = self.fleet.pools.get(card_type)
        if pool is None:
            return NEVER
        changed = changed or {}
        free, ends = 0, []
        for rank in pool.ranks:
            node_free, node_ends = changed.get(rank) or (self.free[rank], self.ends.get(rank, ()))
            free += node_free
            ends.extend(node_ends)
        return _opens_at(free, ends, gpus, self.now)

    def restart_node(self, card_type: str, gpus: int, excluding: int) -> tuple[int, float] | None:
        """Where and when a requeued task of `gpus` GPUs restarts on the card type, its own node `excluding` left
        out: best fit among the nodes with room now (fewest free GPUs, then rank), else the node whose hole opens
        first. None: no other node ever holds it."""
        pool = self.fleet.pools.get(card_type)
        if pool is None:
            return None
        free = self.free
        roomy = [(free[rank], rank) for rank in pool.ranks if rank != excluding and free[rank] >= gpus]
        if roomy:
            return min(roomy)[1], self.now
        opening = min(((self.opens_on(rank, gpus), rank) for rank in pool.ranks if rank != excluding),
                      default=(NEVER, -1))
        return None if opening[0] == NEVER else (opening[1], opening[0])

    def _hole(self, card_type: str, gpus: int) -> Hole:
        pool = self.fleet.pools.get(card_type)
        if pool is None:
            return Hole(NEVER, None, NEVER)
        if gpus > pool.max_node_gpus:
            return Hole(self.opens_on_pool(card_type, gpus), None, NEVER)
        best, best_rank, second = NEVER, None, NEVER
        for rank in pool.ranks:
            at = self.opens_on(rank, gpus)
            if at < best:
                best, best_rank, second = at, rank, best
            elif at < second:
                second = at
        return Hole(best, best_rank, second)


def _opens_at(free: int, ends: Ends, gpus: int, now: float) -> float:
    """The earliest time `free` GPUs plus those of the `ends` come to `gpus` (NEVER: not even once all have ended)."""
    if free >= gpus:
        return now
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


def task_widths(leases: Iterable[RunningLease]) -> dict[str, int]:
    """GPUs per task over all its leases (a task spanning nodes holds one lease per node)."""
    widths: dict[str, int] = {}
    for lease in leases:
        widths[lease.task_id] = widths.get(lease.task_id, 0) + lease.gpus
    return widths
