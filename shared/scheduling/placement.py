"""Placement: which GPUs of which nodes a task gets, by best-fit packing.

`Fleet` is this cycle's private, mutable view of free capacity (the snapshot itself stays
untouched). Nodes are ranked by node id (so results never depend on input order); each card type's
`Pool` indexes its nodes by free-GPU count in buckets (min-heaps of node ranks), so best fit — the
node with the fewest free GPUs that still fits, ties by node id — costs a few heap operations instead
of a scan of the fleet. Free capacity only shrinks during a cycle, which makes two shortcuts exact:
heap entries are invalidated lazily (an entry is stale when its node's free count moved on), and a
request that failed once fails again for any larger GPU count (`failed_at` caches).

All GPUs of a task go on one node unless it asks for more than any node of the type has; then it spans
the fewest nodes, whole free nodes first, the last one chosen by best fit. A memory/bandwidth-heavy task
only uses nodes holding fewer than `max_heavy` heavy tasks.

`limit` (from a reservation, see backfill.py) caps how many GPUs a task may take on given nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from heapq import heappop, heappush
from itertools import repeat
from math import inf
from operator import attrgetter

from typing import TYPE_CHECKING

from shared.scheduling.fleet_start import FleetStart
from shared.scheduling.model import Node, Placement, new_placement

if TYPE_CHECKING:
    from shared.scheduling.kept_snapshot import NodeLayout

Allocation = list[tuple[int, int]]  # (node rank, GPU count) pairs
_NODE_ID, _CARD_TYPE, _FREE = attrgetter("node_id"), attrgetter("card_type"), attrgetter("free")
gpus_unlimited = 1 << 30


class Pool:
    """The free capacity of one card type."""

    __slots__ = ("card_type", "ranks", "total_gpus", "free_total", "max_node_gpus", "headroom",
                 "buckets", "heavy_buckets", "single_failed_at", "span_failed_at")

    def __init__(self, card_type: str) -> None:
        self.card_type = card_type
        self.ranks: Sequence[int] = []
        self.total_gpus = 0
        self.free_total = 0
        self.max_node_gpus = 0
        self.headroom = 0
        self.buckets: list[list[int]] = []
        self.heavy_buckets: list[list[int]] | None = None  # built on the first heavy request
        self.single_failed_at = [inf, inf]  # smallest GPU count that found no node (index: heavy)
        self.span_failed_at = [inf, inf]


class Fleet:
    """Free GPUs per node and per card type for one cycle, indexed for best fit."""

    def __init__(self, nodes: Iterable[Node], max_heavy: int, headroom_of: Callable[[str, int], int],
                 layout: NodeLayout | None = None, free_sorted: Sequence[tuple[int, ...]] | None = None,
                 start: FleetStart | None = None) -> None:
        """`layout`: the nodes' `kept_snapshot.NodeLayout`, when they come in its rank order (a kept snapshot's
        nodes): its ranks, ids and card types are used as they are (read only) instead of worked out again;
        `free_sorted`: then their free GPUs in ascending order (the kept snapshot's), not sorted at a first grant;
        `start`: then the free counts, heavy counts and pools they start from (the kept snapshot's `FleetStart`),
        copied instead of made from the nodes."""
        if layout is None:
            ordered = sorted(nodes, key=_NODE_ID)
            self.node_ids: Sequence[str] = list(map(_NODE_ID, ordered))
            self.rank_of: Mapping[str, int] = dict(zip(self.node_ids, range(len(ordered))))
            self.card_of: Sequence[str] = list(map(_CARD_TYPE, ordered))
        else:
            ordered = nodes if isinstance(nodes, (list, tuple)) else list(nodes)
            self.node_ids, self.rank_of, self.card_of = layout.node_ids, layout.rank_of, layout.card_of
        self.free_gpus: list[Iterable[int]] = list(map(_FREE, ordered) if free_sorted is None else free_sorted)
        if start is None:
            start = FleetStart.of(ordered, self.card_of, None if layout is None else layout.pool_ranks)
        self.free_count = list(start.free_count)
        self.heavy = list(start.heavy)
        self.max_heavy = max_heavy
        self.version = 0  # grows whenever free GPUs or a pool's failure caches change (`may_have_room`)
        self.pools: dict[str, Pool] = {}
        for card_type, kept in start.pools.items():
            pool = self.pools[card_type] = Pool(card_type)
            pool.ranks, pool.total_gpus, pool.free_total = kept.ranks, kept.total_gpus, kept.free_total
            pool.max_node_gpus, pool.buckets = kept.max_node_gpus, list(map(list, kept.buckets))
            pool.headroom = headroom_of(card_type, pool.total_gpus)
        self.free_total = sum(pool.free_total for pool in self.pools.values())

    # -- queries -------------------------------------------------------------------------------

    def place(self, pool: Pool, gpus: int, heavy: bool, limit: Mapping[int, int] | None = None) -> Allocation | None:
        """Where `gpus` GPUs of this pool would go (best fit), or None if they do not fit now."""
        if gpus > pool.free_total:
            return None
        if gpus <= pool.max_node_gpus:
            if gpus >= pool.single_failed_at[heavy]:
                return None
            rank = self._best_fit(pool, gpus, heavy, limit)
            if rank is not None:
                return [(rank, gpus)]
            if limit is None:
                pool.single_failed_at[heavy] = gpus
                self.version += 1
            return None
        if gpus >= pool.span_failed_at[heavy]:
            return None
        allocation = self._span(pool, gpus, heavy, limit)
        if allocation is None and limit is None:
            pool.span_failed_at[heavy] = gpus
            self.version += 1
        return allocation

    def may_have_room(self, gpus: int, heavy: bool, card_types: Iterable[str]) -> bool:
        """False only if no pool of these card types can place `gpus` GPUs (heavy or not) now: not as many
        free, or not below the smallest count that already found no node (as asked, or as a light task:
        the failure caches). Reads only what changes `version`."""
        pools = self.pools
        for card_type in card_types:
            pool = pools.get(card_type)
            if pool is not None and gpus <= pool.free_total:
                failed_at = pool.single_failed_at if gpus <= pool.max_node_gpus else pool.span_failed_at
                if gpus < failed_at[heavy] or gpus < failed_at[0]:
                    return True
        return False

    def largest_free(self, pool: Pool, heavy: bool = False, at_most: int | None = None) -> int:
        """The most free GPUs on any one node of the pool (usable by a heavy task if `heavy`). `at_most`: what it
        was earlier in this cycle, if known (it only shrinks: free counts only shrink, heavy counts only grow)."""
        buckets = self._buckets(pool, heavy)
        for count in range(pool.max_node_gpus if at_most is None else at_most, 0, -1):
            self._clean(buckets[count], count, heavy)
            if buckets[count]:
                return count
        return 0

    def card_of_node(self, node_id: str) -> str | None:
        """The card type of a node of the snapshot (None for a node it does not have)."""
        rank = self.rank_of.get(node_id)
        return None if rank is None else self.card_of[rank]

    def usable_free(self, rank: int, heavy: bool) -> int:
        """Free GPUs of a node that a task may use (0 for a heavy task on a node full of heavy work)."""
        if heavy and self.heavy[rank] >= self.max_heavy:
            return 0
        return self.free_count[rank]

    # -- updates -------------------------------------------------------------------------------

    def take(self, allocation: Allocation, heavy: bool) -> tuple[Placement, ...]:
        """Book the allocation's GPUs (lowest free indices first) and return its placements."""
        placements = []
        for rank, count in allocation:
            indices = self._remove_gpus(rank, count)
            if heavy:
                self.heavy[rank] += 1
            self._set_free(rank, self.free_count[rank] - count)
            placements.append(new_placement(self.node_ids[rank], indices))
        return tuple(placements)

    def hold(self, rank: int, count: int) -> None:
        """Keep `count` free GPUs of a node out of this cycle (waiting for a preempting task)."""
        if count > 0:
            self._remove_gpus(rank, count)
            self._set_free(rank, self.free_count[rank] - count)

    # -- internals -----------------------------------------------------------------------------

    def _buckets(self, pool: Pool, heavy: bool) -> list[list[int]]:
        if not heavy:
            return pool.buckets
        if pool.heavy_buckets is None:
            pool.heavy_buckets = [[] for _ in range(pool.max_node_gpus + 1)]
            for rank in pool.ranks:
                if self.free_count[rank] and self.heavy[rank] < self.max_heavy:
                    pool.heavy_buckets[self.free_count[rank]].append(rank)
        return pool.heavy_buckets

    def _clean(self, heap: list[int], count: int, heavy: bool) -> None:
        """Drop stale entries from the top of a bucket heap."""
        free = self.free_count
        if heavy:
            loaded, cap = self.heavy, self.max_heavy
            while heap and (free[heap[0]] != count or loaded[heap[0]] >= cap):
                heappop(heap)
        else:
            while heap and free[heap[0]] != count:
                heappop(heap)

    def _best_fit(self, pool: Pool, gpus: int, heavy: bool, limit: Mapping[int, int] | None) -> int | None:
        buckets = self._buckets(pool, heavy)
        for count in range(gpus, pool.max_node_gpus + 1):
            heap = buckets[count]
            self._clean(heap, count, heavy)
            if not heap:
                continue
            if limit is None or limit.get(heap[0], gpus) >= gpus:
                return heap[0]
            rank = self._first_within(heap, count, heavy, gpus, limit)
            if rank is not None:
                return rank
        return None

    def _first_within(self, heap: list[int], count: int, heavy: bool, gpus: int,
                      limit: Mapping[int, int]) -> int | None:
        """The lowest-ranked valid node of a bucket whose limit allows `gpus` (heap left intact)."""
        popped: list[int] = []
        found = None
        while heap:
            self._clean(heap, count, heavy)
            if not heap:
                break
            if limit.get(heap[0], gpus) >= gpus:
                found = heap[0]
                break
            popped.append(heappop(heap))
        for rank in popped:
            heappush(heap, rank)
        return found

    def _span(self, pool: Pool, gpus: int, heavy: bool, limit: Mapping[int, int] | None) -> Allocation | None:
        """Fewest nodes: most usable GPUs first; the last node is the best fit for the remainder."""
        if limit is not None:
            return span_allocation(self._rooms(pool, heavy, limit), gpus)
        buckets = self._buckets(pool, heavy)
        allocation: Allocation = []
        remaining = gpus
        for count in range(pool.max_node_gpus, 0, -1):
            whole = remaining // count - (remaining % count == 0)  # nodes of this count taken whole before the last
            for rank in self._lowest_valid(buckets[count], count, heavy, whole + 1):
                if count >= remaining:
                    chosen = {rank for rank, _ in allocation}
                    return allocation + [(self._last_fit(pool, remaining, heavy, chosen), remaining)]
                allocation.append((rank, count))
                remaining -= count
        return None

    def _last_fit(self, pool: Pool, gpus: int, heavy: bool, chosen: set[int]) -> int:
        """Best fit for a spanning task's remainder among the nodes not already chosen."""
        buckets = self._buckets(pool, heavy)
        for count in range(gpus, pool.max_node_gpus + 1):
            heap = buckets[count]
            self._clean(heap, count, heavy)
            if heap and heap[0] not in chosen:
                return heap[0]
            if heap:
                spare = [rank for rank in self._lowest_valid(heap, count, heavy, len(chosen) + 1) if rank not in chosen]
                if spare:
                    return spare[0]
        raise AssertionError("a spanning task's remainder found no node although the nodes were counted")

    def _lowest_valid(self, heap: list[int], count: int, heavy: bool, most: int) -> list[int]:
        """The first `most` of `_valid_ranks(heap, count, heavy)` (fewer if the bucket has fewer), without sorting
        the whole bucket: its valid entries popped in order and pushed back (stale ones met are dropped, as
        `_clean` drops them: free counts only shrink and heavy counts only grow during a cycle)."""
        found: list[int] = []
        while len(found) < most:
            self._clean(heap, count, heavy)
            if not heap:
                break
            found.append(heappop(heap))
        for rank in found:
            heappush(heap, rank)
        return found

    def _valid_ranks(self, heap: list[int], count: int, heavy: bool) -> list[int]:
        """The bucket's current nodes, lowest rank first."""
        free, loaded, cap = self.free_count, self.heavy, self.max_heavy
        if heavy:
            return sorted(rank for rank in heap if free[rank] == count and loaded[rank] < cap)
        return sorted(rank for rank in heap if free[rank] == count)

    def _rooms(self, pool: Pool, heavy: bool, limit: Mapping[int, int]) -> list[tuple[int, int]]:
        """(rank, GPUs the task may take) of every node with room, most room first, then rank. Read from the
        bucket heaps, not from every node of the pool: each node with usable free GPUs is in the bucket of
        its free count (`_set_free` pushes it there on every change; `_valid_ranks` drops stale entries), and
        its room is that count unless `limit` (a reservation's few nodes) caps it lower."""
        buckets, capped = self._buckets(pool, heavy), {}
        for rank, cap in limit.items():
            if cap < gpus_unlimited and self.card_of[rank] == pool.card_type:
                capped[rank] = min(self.usable_free(rank, heavy), cap)
        rooms: list[tuple[int, int]] = []
        for count in range(pool.max_node_gpus, 0, -1):
            ranks = self._valid_ranks(buckets[count], count, heavy)
            if capped:
                ranks = sorted([rank for rank in ranks if rank not in capped]
                               + [rank for rank, room in capped.items() if room == count])
            rooms.extend(zip(ranks, repeat(count)))
        return rooms

    def _remove_gpus(self, rank: int, count: int) -> tuple[int, ...]:
        """The node's `count` lowest free GPUs, no longer free (its free GPUs are sorted at its first grant,
        unless they came sorted: a kept snapshot's `free_sorted`)."""
        free = self.free_gpus[rank]
        if not isinstance(free, tuple):
            free = tuple(sorted(free))
        self.free_gpus[rank] = free[count:]
        return free[:count]

    def _set_free(self, rank: int, count: int) -> None:
        self.version += 1
        pool = self.pools[self.card_of[rank]]
        pool.free_total -= self.free_count[rank] - count
        self.free_total -= self.free_count[rank] - count
        self.free_count[rank] = count
        if count <= 0:
            return
        heappush(pool.buckets[count], rank)
        if pool.heavy_buckets is not None and self.heavy[rank] < self.max_heavy:
            heappush(pool.heavy_buckets[count], rank)


def span_allocation(rooms: list[tuple[int, int]], gpus: int) -> Allocation | None:
    """Spread `gpus` over nodes given as (rank, room), most room first: fewest nodes, best-fit last.

    `rooms` must be sorted by room descending, then rank. Returns None if the rooms do not add up.
    """
    allocation: Allocation = []
    remaining = gpus
    for index, (rank, room) in enumerate(rooms):
        if room >= remaining:
            last = _smallest_room_at_least(rooms[index:], remaining)
            allocation.append((last, remaining))
            return allocation
        allocation.append((rank, room))
        remaining -= room
    return None


def _smallest_room_at_least(rooms: list[tuple[int, int]], needed: int) -> int:
    """The rank of the node with the least room that still holds `needed` (ties: lowest rank)."""
    fitting = [(room, rank) for rank, room in rooms if room >= needed]
    return min(fitting)[1]
