"""`KeptSnapshot`: the fleet's snapshot kept between cycles, with what a cycle derives from its leases.

Every cycle over 10,000 nodes and 30,000 running leases used to rank the nodes by id and read every lease
several times before deciding anything: for the reservation's sweep (when each lease frees its GPUs), for
the victim index and the headroom's borrowed GPUs (the opportunistic leases, and the standard leases that borrow
the headroom as fillers), and for the core demand (the core leases) — about a tenth of the instructions of the headline's full-walk cycle (callgrind; BENCHMARKS.md,
session 12). Between two cycles only a few hundred leases start or end
and the nodes stay the same. So the dispatcher and the simulator keep one `KeptSnapshot` and update it
from what changed (`changed`), and `plan()` reads what it keeps (`NodeLayout`, `LeaseIndex`, each node's free
GPUs sorted, the columns its `Fleet` starts from: `FleetStart`) instead.

A value: it *is* a `Snapshot` (its nodes in rank order, its leases, its quotas), and what it keeps beside
is a function of those alone — the layout of the nodes, their free GPUs in ascending order, the fleet's start
(free and heavy counts, the pools' totals and buckets), and the leases
on them grouped by the card type of their node (the parts of the cycle that depend on the policy or on `now`
are still worked out by the cycle, from the kept groups). `plan()` therefore decides exactly as for a plain
`Snapshot` with the same nodes, leases and quotas; `changed` updates the kept parts so that they equal what
`of` builds from the result (tests compare both after generated sequences of grants, releases, preemptions
and node changes). A node added, removed or changed in card type or size changes the layout: the index is
then built afresh.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter

from shared.scheduling.backfill import Release
from shared.scheduling.fleet_start import FleetStart
from shared.scheduling.model import Node, PriorityClass, QuotaAccount, RunningLease, Snapshot

_NODE_ID = attrgetter("node_id")
_FIRST = itemgetter(0)
_OPPORTUNISTIC, _CORE, _STANDARD = PriorityClass.OPPORTUNISTIC, PriorityClass.CORE, PriorityClass.STANDARD


@dataclass(frozen=True, slots=True, eq=False)
class NodeLayout:
    """The nodes of a fleet ranked by node id (`placement.Fleet`'s ranks), with their card types and sizes,
    and each card type's ranks in ascending order. Equal layouts have equal `key`s."""

    node_ids: tuple[str, ...]
    card_of: tuple[str, ...]  # by rank
    sizes: tuple[int, ...]  # `Node.gpus` by rank
    rank_of: Mapping[str, int]
    card_type_of: Mapping[str, str]  # node id -> card type
    pool_ranks: Mapping[str, tuple[int, ...]]  # card type -> its ranks, ascending

    @classmethod
    def of(cls, ordered: Sequence[Node]) -> NodeLayout:
        """The layout of these nodes, given sorted by node id."""
        node_ids = tuple(map(_NODE_ID, ordered))
        card_of = tuple(node.card_type for node in ordered)
        ranks: dict[str, list[int]] = {}
        for rank, card_type in enumerate(card_of):
            ranks.setdefault(card_type, []).append(rank)
        return cls(node_ids, card_of, tuple(node.gpus for node in ordered), dict(zip(node_ids, range(len(node_ids)))),
                   dict(zip(node_ids, card_of)), {card_type: tuple(found) for card_type, found in ranks.items()})

    @property
    def key(self) -> tuple:
        return (self.node_ids, self.card_of, self.sizes)

    def holds(self, node: Node) -> bool:
        """True if the node is one of the layout's, with the same card type and size."""
        rank = self.rank_of.get(node.node_id)
        return rank is not None and self.card_of[rank] == node.card_type and self.sizes[rank] == node.gpus


@dataclass(frozen=True, slots=True)
class LeaseIndex:
    """The running leases on the layout's nodes, grouped by their node's card type (leases on nodes the
    snapshot does not have are left out, as the cycle leaves them out):

    - `releases`: per card type, the leases that are not opportunistic as the reservation's sweep sees them —
      `Release(estimated end, rank, GPUs, heavy, False)` — paired with their lease ids, sorted;
    - `opportunistic`: per card type, lease id -> (rank, lease) of the opportunistic leases (whether they
      borrow headroom or yield to a reservation depends on the policy and on `now`: the cycle works it out);
    - `core`: per card type, lease id -> lease of the core leases (the headroom's core demand);
    - `fillers`: per card type, lease id -> lease of the standard leases granted on headroom GPUs as fillers
      (`RunningLease.borrowed_headroom`): with `policy.checkpointing_standard_borrows` they borrow the headroom
      and may be victims (they are in `releases` too, as every lease that is not opportunistic).
    """

    releases: Mapping[str, list[tuple[Release, str]]]
    opportunistic: Mapping[str, dict[str, tuple[int, RunningLease]]]
    core: Mapping[str, dict[str, RunningLease]]
    fillers: Mapping[str, dict[str, RunningLease]]

    @classmethod
    def of(cls, leases: Iterable[RunningLease], layout: NodeLayout) -> LeaseIndex:
        index = cls({}, {}, {}, {})
        for lease in leases:
            index._add(lease, layout, sort=False)
        for pairs in index.releases.values():
            pairs.sort()
        return index

    def changed(self, added: Iterable[RunningLease], removed: Iterable[RunningLease], layout: NodeLayout) -> LeaseIndex:
        """A new index with the `removed` leases (as this index holds them) taken out and the `added` ones put
        in; this one is unchanged (each group that changes is copied first)."""
        index = LeaseIndex(dict(self.releases), dict(self.opportunistic), dict(self.core), dict(self.fillers))
        copied: set[tuple[int, str]] = set()
        for lease in removed:
            index._remove(lease, layout, copied)
        for lease in added:
            index._add(lease, layout, sort=True, copied=copied)
        return index

    def opportunistic_leases(self, fillers: bool = False) -> list[RunningLease]:
        """Every opportunistic lease on the layout's nodes; with `fillers`, then every standard lease that borrows
        the headroom as a filler."""
        leases = [lease for group in self.opportunistic.values() for _, lease in group.values()]
        if fillers:
            leases += [lease for group in self.fillers.values() for lease in group.values()]
        return leases

    def core_leases(self) -> list[RunningLease]:
        """Every core lease on the layout's nodes."""
        return [lease for group in self.core.values() for lease in group.values()]

    def _group(self, kind: int, card_type: str, copied: set[tuple[int, str]] | None):
        """The group of this kind (0 releases, 1 opportunistic, 2 core, 3 fillers) for the card type, copied once
        per `changed` before it is modified (`copied`: the groups copied so far; None: building, no copy)."""
        groups = self._kinds()[kind]
        group = groups.get(card_type)
        if group is None:
            group = groups[card_type] = [] if kind == 0 else {}
        elif copied is not None and (kind, card_type) not in copied:
            group = groups[card_type] = group.copy()
        if copied is not None:
            copied.add((kind, card_type))
        return group

    def _add(self, lease: RunningLease, layout: NodeLayout, sort: bool,
             copied: set[tuple[int, str]] | None = None) -> None:
        rank = layout.rank_of.get(lease.node_id)
        if rank is None:
            return
        card_type = layout.card_of[rank]
        if lease.priority_class == _OPPORTUNISTIC:
            self._group(1, card_type, copied)[lease.lease_id] = (rank, lease)
            return
        if lease.priority_class == _CORE:
            self._group(2, card_type, copied)[lease.lease_id] = lease
        elif lease.borrowed_headroom and lease.priority_class == _STANDARD:
            self._group(3, card_type, copied)[lease.lease_id] = lease
        pair = (_release(lease, rank), lease.lease_id)
        pairs = self._group(0, card_type, copied)
        if sort:
            insort(pairs, pair)
        else:
            pairs.append(pair)

    def _remove(self, lease: RunningLease, layout: NodeLayout, copied: set[tuple[int, str]]) -> None:
        rank = layout.rank_of.get(lease.node_id)
        if rank is None:
            return
        card_type = layout.card_of[rank]
        if lease.priority_class == _OPPORTUNISTIC:
            self._discard(1, card_type, copied, lease.lease_id)
            return
        if lease.priority_class == _CORE:
            self._discard(2, card_type, copied, lease.lease_id)
        elif lease.borrowed_headroom and lease.priority_class == _STANDARD:
            self._discard(3, card_type, copied, lease.lease_id)
        pair = (_release(lease, rank), lease.lease_id)
        pairs = self._group(0, card_type, copied)
        at = bisect_left(pairs, pair)
        if at == len(pairs) or pairs[at] != pair:
            raise ValueError(f"lease {lease.lease_id} is not kept as given")
        self._discard(0, card_type, copied, at)

    def _discard(self, kind: int, card_type: str, copied: set[tuple[int, str]], key: int | str) -> None:
        """Take one entry out of a group (`_group`): a lease id, or a position of `releases`; a group left empty
        goes (as `of` would not make it)."""
        group = self._group(kind, card_type, copied)
        del group[key]
        if not group:
            del self._kinds()[kind][card_type]

    def _kinds(self) -> tuple[Mapping, Mapping, Mapping, Mapping]:
        """The groups by kind (`_group`'s numbers)."""
        return self.releases, self.opportunistic, self.core, self.fillers


def _sorted_free(ordered: Iterable[Node]) -> tuple[tuple[int, ...], ...]:
    """Each node's free GPUs in ascending order."""
    return tuple(tuple(sorted(node.free)) for node in ordered)


def _release(lease: RunningLease, rank: int) -> Release:
    """When a lease that is not opportunistic frees its GPUs, as the reservation's sweep sees it."""
    return Release(lease.estimated_end, rank, len(lease.gpu_indices), lease.heavy, False)


class KeptSnapshot(Snapshot):
    """A `Snapshot` (nodes sorted by node id) with its `layout`, its leases' `index`, its nodes' free GPUs
    sorted (`free_sorted`, by rank: what `placement.Fleet` hands out lowest first) and what its `Fleet` starts
    from (`fleet_start`) kept beside. Made by `of` (or the constructor, from nodes, leases and quotas) and
    `changed`; never mutated."""

    __slots__ = ("layout", "index", "free_sorted", "fleet_start", "_by_id")

    def __init__(self, nodes: Iterable[Node] = (), leases: Iterable[RunningLease] = (),
                 quotas: Mapping[str, QuotaAccount] | None = None) -> None:
        ordered, leases = tuple(sorted(nodes, key=_NODE_ID)), tuple(leases)
        by_id = {lease.lease_id: lease for lease in leases}
        if len(by_id) != len(leases):
            raise ValueError("lease ids must be unique")
        layout = NodeLayout.of(ordered)
        self._set(ordered, by_id, dict(quotas or {}), layout, LeaseIndex.of(by_id.values(), layout),
                  _sorted_free(ordered), FleetStart.of(ordered, layout.card_of, layout.pool_ranks))

    @classmethod
    def of(cls, snapshot: Snapshot) -> KeptSnapshot:
        """The snapshot, kept (a kept one is returned as it is)."""
        if isinstance(snapshot, KeptSnapshot):
            return snapshot
        return cls(snapshot.nodes, snapshot.leases, snapshot.quotas)

    def _set(self, nodes: tuple[Node, ...], by_id: dict[str, RunningLease], quotas: Mapping[str, QuotaAccount],
             layout: NodeLayout, index: LeaseIndex, free_sorted: tuple[tuple[int, ...], ...], fleet_start: FleetStart) -> None:
        for name, value in (("nodes", nodes), ("leases", tuple(by_id.values())), ("quotas", quotas),
                            ("layout", layout), ("index", index), ("free_sorted", free_sorted),
                            ("fleet_start", fleet_start), ("_by_id", by_id)):
            object.__setattr__(self, name, value)

    def running(self, lease_id: str) -> RunningLease | None:
        """The running lease of this id as the snapshot holds it (None: not running)."""
        return self._by_id.get(lease_id)

    def node(self, node_id: str) -> Node | None:
        """The node of this id as the snapshot holds it (None: not in the snapshot)."""
        rank = self.layout.rank_of.get(node_id)
        return None if rank is None else self.nodes[rank]

    def changed(self, nodes: Iterable[Node] = (), added: Iterable[RunningLease] = (), removed: Iterable[str] = (),
                removed_nodes: Iterable[str] = (), quotas: Mapping[str, QuotaAccount] | None = None) -> KeptSnapshot:
        """A new snapshot with these `nodes` replacing (or joining) the nodes of the same id, the nodes named in
        `removed_nodes` gone, the leases named in `removed` ended (each must be running), the `added` leases
        running (a changed lease: its id removed, its new value added) and, if given, these `quotas`. This one
        is unchanged. The index is updated lease by lease while the layout stands, else built afresh."""
        by_id = dict(self._by_id)
        gone = []
        for lease_id in removed:
            lease = by_id.pop(lease_id, None)
            if lease is None:
                raise ValueError(f"lease {lease_id} is not running")
            gone.append(lease)
        new = list(added)
        for lease in new:
            if by_id.setdefault(lease.lease_id, lease) is not lease:
                raise ValueError(f"lease {lease.lease_id} is running already")
        nodes = list(nodes)
        ordered, layout = self._nodes_after(nodes, set(removed_nodes))
        quotas = self.quotas if quotas is None else dict(quotas)
        kept = object.__new__(KeptSnapshot)
        if layout is self.layout:
            start = self.fleet_start.changed(nodes, layout.rank_of, layout.card_of) if nodes else self.fleet_start
            kept._set(ordered, by_id, quotas, layout, self.index.changed(new, gone, layout),
                      self._free_sorted_after(nodes, layout),
                      start if start is not None else FleetStart.of(ordered, layout.card_of, layout.pool_ranks))
        else:
            kept._set(ordered, by_id, quotas, layout, LeaseIndex.of(by_id.values(), layout), _sorted_free(ordered),
                      FleetStart.of(ordered, layout.card_of, layout.pool_ranks))
        return kept

    def _free_sorted_after(self, nodes: list[Node], layout: NodeLayout) -> tuple[tuple[int, ...], ...]:
        """`free_sorted` after these nodes replaced theirs, the layout standing."""
        if not nodes:
            return self.free_sorted
        free = list(self.free_sorted)
        for node in nodes:
            free[layout.rank_of[node.node_id]] = tuple(sorted(node.free))
        return tuple(free)

    def _nodes_after(self, nodes: list[Node], removed: set[str]) -> tuple[tuple[Node, ...], NodeLayout]:
        """The nodes in rank order after the change, and their layout (this one's while it stands)."""
        layout = self.layout
        if not removed and all(map(layout.holds, nodes)):
            ordered = list(self.nodes)
            for node in nodes:
                ordered[layout.rank_of[node.node_id]] = node
            return tuple(ordered), layout
        by_id = {node.node_id: node for node in self.nodes if node.node_id not in removed}
        by_id.update((node.node_id, node) for node in nodes)
        ordered = tuple(sorted(by_id.values(), key=_NODE_ID))
        fresh = NodeLayout.of(ordered)
        return ordered, layout if fresh.key == layout.key else fresh

    def __reduce__(self) -> tuple:
        return (KeptSnapshot, (self.nodes, self.leases, self.quotas))  # what is kept beside is made again

    def __repr__(self) -> str:
        return f"KeptSnapshot({len(self.nodes)} nodes, {len(self.leases)} leases, {len(self.quotas)} quota accounts)"
