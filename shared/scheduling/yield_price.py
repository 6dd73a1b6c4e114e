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
(`restart_node`), and — with `Policy.standard_yields_drain_kth_hole` — when the k-th hole of some width opens over a
card type's nodes, some of them changed (`kth_opening`). It reads the free GPUs when it is made and counts the ends of
the cycle's grants and holds it is given (`releases`): GPUs granted earlier in the cycle come free again at their
grant's estimated end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from shared.scheduling.model import RunningLease
from shared.scheduling.placement import Fleet

NEVER = float("inf")

Ends = Sequence[tuple[float, int]]  # (estimated end, GPUs) of what holds a node's GPUs now
Changed = Mapping[int, tuple[int, Ends]]  # rank -> free GPUs and ends of nodes as a yield would leave them


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
                 releases: Iterable[tuple] = (), kept: Mapping[str, int] | None = None,
                 ahead: Callable[[str, RunningLease], int] | None = None) -> None:
        self.fleet, self.now = fleet, now
        self.kept = kept or {}  # card type -> GPUs the headroom keeps from standard restarts (`restart_wait`)
        self.ahead = ahead  # (card type, lease) -> GPUs of the queue ahead of its task requeued (`restart_wait`)
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
        self._openings: dict[tuple[str, int], list[tuple[float, int]]] = {}

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

    def opens_on_pool(self, card_type: str, gpus: int, changed: Changed | None = None) -> float:
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

    def kth_opening(self, card_type: str, gpus: int, k: int, changed: Changed | None = None) -> float:
        """When the k-th hole of `gpus` GPUs opens on the card type (k ≥ 1), some nodes changed (`changed`: rank -> free
        GPUs, ends): a node holds its j-th such hole once j × `gpus` of its GPUs are free at once (`node_openings`). A
        changed node's j-th hole opens no sooner than it did: narrow work refills a node emptied sooner long before a
        wide task's drain could use it. Fewer holes than k ever: the last one's time (NEVER: none at all, or fewer once changed)."""
        key = (card_type, gpus)
        openings = self._openings.get(key)
        if openings is None:
            pool = self.fleet.pools.get(card_type)
            ranks = pool.ranks if pool is not None else ()
            openings = self._openings[key] = sorted(
                (at, rank) for rank in ranks for at in node_openings(self.free[rank], self.ends.get(rank, ()), gpus, self.now))
        changed, k = changed or {}, min(k, len(openings))
        kept = []
        for at, rank in openings:
            if rank not in changed:
                kept.append(at)
                if len(kept) == k:
                    break
        for rank, (free, ends) in changed.items():
            before = node_openings(self.free[rank], self.ends.get(rank, ()), gpus, self.now)
            after = node_openings(free, ends, gpus, self.now)
            kept.extend(at for at in map(max, zip_longest(after, before, fillvalue=NEVER)) if at != NEVER)
        kept.sort()
        return kept[k - 1] if 0 < k <= len(kept) else NEVER

    def restart_wait(self, card_type: str, gpus: int, excluding: int, taken: Changed | None = None,
                     lease: RunningLease | None = None) -> float:
        """Seconds until a requeued standard task of `gpus` GPUs may restart on the card type, off its node
        `excluding`: a hole that wide, and — where the headroom keeps GPUs from standard work (`kept`, with
        `Policy.standard_yields_restart_after_headroom`) or the queue holds standard work ranked ahead of the
        `lease`'s task (`ahead`, with `Policy.standard_yields_restart_after_queue`) — the card type's free GPUs past
        those, its nodes as the preempting core task's take leaves them (`taken`: rank -> free GPUs, ends)."""
        return max(self.wait(card_type, gpus, excluding), self._restart_lets(card_type, gpus, taken, lease) - self.now)

    def restart_node(self, card_type: str, gpus: int, excluding: int,
                     taken: Changed | None = None, lease: RunningLease | None = None) -> tuple[int, float] | None:
        """Where and when a requeued task of `gpus` GPUs restarts on the card type, its own node `excluding` left
        out: best fit among the nodes with room now (fewest free GPUs, then rank), else the node whose hole opens
        first — no sooner than the headroom and the queue ahead let it (`restart_wait`). None: no other node ever
        holds it."""
        pool = self.fleet.pools.get(card_type)
        if pool is None:
            return None
        free, allowed = self.free, self._restart_lets(card_type, gpus, taken, lease)
        roomy = [(free[rank], rank) for rank in pool.ranks if rank != excluding and free[rank] >= gpus]
        if roomy and allowed <= self.now:
            return min(roomy)[1], self.now
        opening = min(((max(self.opens_on(rank, gpus), allowed), rank) for rank in pool.ranks if rank != excluding),
                      default=(NEVER, -1))
        return None if opening[0] == NEVER else (opening[1], opening[0])

    def _restart_lets(self, card_type: str, gpus: int, taken: Changed | None, lease: RunningLease | None) -> float:
        """When the card type's free GPUs (some nodes `taken`: changed) first exceed what the headroom keeps (`kept`)
        and the queue ranked ahead of the lease's task holds (`ahead`) by `gpus` (now: neither holds any)."""
        before = self.kept.get(card_type, 0)
        if self.ahead is not None and lease is not None:
            before += self.ahead(card_type, lease)
        return self.now if before <= 0 else self.opens_on_pool(card_type, before + gpus, taken)

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


def node_openings(free: int, ends: Ends, gpus: int, now: float) -> list[float]:
    """When one node holds its first, second, … hole of `gpus` GPUs: the times `free` GPUs plus those of the `ends`
    come to 1, 2, … × `gpus` (as `_opens_at`, each multiple in turn)."""
    times, want = [], gpus
    while free >= want:
        times.append(now)
        want += gpus
    for end, count in sorted(ends):
        free += count
        while free >= want:
            times.append(max(now, end))
            want += gpus
    return times


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
