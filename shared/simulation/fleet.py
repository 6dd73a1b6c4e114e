"""Mutable occupancy of the simulated fleet, exposed to the scheduling core as immutable `Node`s.

Only nodes whose occupancy changed are rebuilt, so a snapshot of a 1,000-node fleet costs a tuple
copy, not 1,000 new objects; `take_changed` hands the rebuilt ones to a kept snapshot.
"""

from __future__ import annotations

from shared.scheduling.model import Node, Placement
from shared.simulation.cluster import Cluster


class Fleet:
    """Free GPU indices and heavy-task counts per node."""

    def __init__(self, cluster: Cluster) -> None:
        self._views: dict[str, Node] = {node.node_id: node for node in cluster.empty_nodes()}
        self._free: dict[str, set[int]] = {node_id: set(node.free) for node_id, node in self._views.items()}
        self._heavy: dict[str, int] = dict.fromkeys(self._views, 0)
        self.capacity = cluster.capacity
        self.busy_gpus = 0
        self._nodes_cache: tuple[Node, ...] | None = None
        self._changed: set[str] = set()  # nodes rebuilt since `take_changed`

    def nodes(self) -> tuple[Node, ...]:
        """Current view of every node (cached until something changes)."""
        if self._nodes_cache is None:
            self._nodes_cache = tuple(self._views.values())
        return self._nodes_cache

    def take_changed(self) -> list[Node]:
        """The nodes rebuilt since the last call (by node id), as they are now."""
        changed = [self._views[node_id] for node_id in sorted(self._changed)]
        self._changed.clear()
        return changed

    def card_of(self, node_id: str) -> str:
        return self._views[node_id].card_type

    def occupy(self, placements: tuple[Placement, ...], heavy: bool) -> None:
        """Take the placements' GPUs; a GPU already taken is a broken invariant of the plan."""
        for placement in placements:
            free = self._free[placement.node_id]
            wanted = set(placement.gpu_indices)
            if not wanted <= free or len(wanted) != len(placement.gpu_indices):
                raise RuntimeError(f"plan granted busy or repeated GPUs {placement} (free: {sorted(free)})")
            free -= wanted
            self._heavy[placement.node_id] += int(heavy)
            self.busy_gpus += len(wanted)
            self._refresh(placement.node_id)

    def release(self, placements: tuple[Placement, ...], heavy: bool) -> None:
        """Give the placements' GPUs back."""
        for placement in placements:
            self._free[placement.node_id].update(placement.gpu_indices)
            self._heavy[placement.node_id] -= int(heavy)
            self.busy_gpus -= len(placement.gpu_indices)
            self._refresh(placement.node_id)

    def _refresh(self, node_id: str) -> None:
        old = self._views[node_id]
        free = frozenset(self._free[node_id])
        self._views[node_id] = Node(node_id, old.card_type, old.gpus, free, self._heavy[node_id])
        self._nodes_cache = None
        self._changed.add(node_id)
