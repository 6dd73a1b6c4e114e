"""`FleetStart`: the columns a cycle's `placement.Fleet` starts from, made from the nodes or kept between cycles.

Every cycle used to read each of the 10,000 nodes of the headline fleet three times before deciding anything —
its heavy count, its size against its free count, its place in its pool's bucket of that free count —
~18.5 M instructions, 1.7% of the first plan over kept inputs and 8% of a steady cycle with no GPU free
(callgrind; docs/BENCHMARKS.md, session 22). Between two cycles only the nodes a grant, a release or a
preemption touched change, so a `KeptSnapshot` keeps its `FleetStart` and updates it from those nodes
(`changed`); a `Fleet` copies the columns it will mutate (in C) instead of making them from the nodes.

A value: it is a function of the nodes alone (in rank order), and `changed` gives what `of` gives for the
changed nodes (tests compare both after generated sequences of cycles).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.scheduling.model import Node


@dataclass(frozen=True, slots=True)
class PoolStart:
    """One card type's pool as a fleet starts it: its node ranks (ascending), the GPUs of its nodes (each node's
    size: the larger of its GPUs and its free count), its free GPUs, its largest node, and per free count the
    ranks of its nodes with that many free GPUs, ascending (each a valid heap; count 0 is kept empty)."""

    ranks: Sequence[int]
    total_gpus: int
    free_total: int
    max_node_gpus: int
    buckets: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class FleetStart:
    """By node rank: free GPU counts and heavy tasks running; per card type (in order of its first rank) its
    `PoolStart`."""

    free_count: tuple[int, ...]
    heavy: tuple[int, ...]
    pools: Mapping[str, PoolStart]

    @classmethod
    def of(cls, ordered: Sequence[Node], card_of: Sequence[str],
           pool_ranks: Mapping[str, Sequence[int]] | None = None) -> FleetStart:
        """The start of a fleet of these nodes, given in rank order with their card types (`card_of`) and, if
        known, each card type's ranks ascending (`NodeLayout.pool_ranks`)."""
        free_count = tuple([len(node.free) for node in ordered])
        # each node's size: the larger of its GPUs and its free count
        sizes = [free if free > node.gpus else node.gpus for node, free in zip(ordered, free_count)]
        if pool_ranks is None:
            ranks: dict[str, list[int]] = {}
            for rank, card_type in enumerate(card_of):
                known = ranks.get(card_type)
                if known is None:
                    known = ranks[card_type] = []
                known.append(rank)
            pool_ranks = ranks
        pools = {card_type: _pool_start(found, sizes, free_count) for card_type, found in pool_ranks.items()}
        return cls(free_count, tuple([node.heavy_running for node in ordered]), pools)

    def changed(self, nodes: Sequence[Node], rank_of: Mapping[str, int], card_of: Sequence[str]) -> FleetStart | None:
        """The start after these nodes replaced the nodes of their ranks (the layout standing: same card types and
        GPUs); None if a node's size changes with it (more GPUs free than it has: the caller makes it anew)."""
        free_count, heavy = list(self.free_count), list(self.heavy)
        moved: dict[str, dict[int, list[int]]] = {}  # card type -> free count -> its bucket, copied
        freed: dict[str, int] = {}  # card type -> change of its free GPUs
        for node in nodes:
            rank = rank_of[node.node_id]
            before, after = free_count[rank], len(node.free)
            if before > node.gpus or after > node.gpus:
                return None
            heavy[rank] = node.heavy_running
            if before == after:
                continue
            free_count[rank] = after
            card_type = card_of[rank]
            freed[card_type] = freed.get(card_type, 0) + after - before
            buckets, kept = moved.setdefault(card_type, {}), self.pools[card_type].buckets
            if before:
                bucket = _bucket(buckets, kept, before)
                del bucket[bisect_left(bucket, rank)]
            if after:
                insort(_bucket(buckets, kept, after), rank)
        pools = dict(self.pools)
        for card_type, buckets in moved.items():
            pool = pools[card_type]
            replaced = list(pool.buckets)
            for count, bucket in buckets.items():
                replaced[count] = tuple(bucket)
            pools[card_type] = PoolStart(pool.ranks, pool.total_gpus, pool.free_total + freed[card_type],
                                         pool.max_node_gpus, tuple(replaced))
        return FleetStart(tuple(free_count), tuple(heavy), pools)


def _pool_start(ranks: Sequence[int], sizes: list[int], free_count: Sequence[int]) -> PoolStart:
    """The pool of the nodes of these ranks (ascending), with each node's size and free count by rank."""
    pool_sizes = list(map(sizes.__getitem__, ranks))
    max_node_gpus = max(pool_sizes)
    buckets: list[list[int]] = [[] for _ in range(max_node_gpus + 1)]
    for rank in ranks:  # ascending ranks: each bucket is sorted, so a valid heap
        if free_count[rank]:
            buckets[free_count[rank]].append(rank)
    return PoolStart(ranks, sum(pool_sizes), sum(map(free_count.__getitem__, ranks)), max_node_gpus,
                     tuple(map(tuple, buckets)))


def _bucket(buckets: dict[int, list[int]], kept: tuple[tuple[int, ...], ...], count: int) -> list[int]:
    """The bucket of this free count being changed (a copy of the kept one, made on first use)."""
    bucket = buckets.get(count)
    if bucket is None:
        bucket = buckets[count] = list(kept[count])
    return bucket
