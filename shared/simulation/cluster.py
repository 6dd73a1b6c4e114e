"""The simulated fleet: parse `H100:16x8,A100-80G:8x8` specs or `node_id,card_type,gpus` CSVs,
and size a single-card-type cluster for a target offered load.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from shared.scheduling.model import Node

_SPEC_PART = re.compile(r"^\s*(?P<card>[^:,\s]+)\s*:\s*(?P<nodes>\d+)\s*[xX]\s*(?P<gpus>\d+)\s*$")


@dataclass(frozen=True, slots=True)
class ClusterNode:
    node_id: str
    card_type: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Cluster:
    """A fixed set of GPU nodes and a human description of where it came from."""

    nodes: tuple[ClusterNode, ...]
    description: str

    @property
    def capacity(self) -> int:
        """Total GPUs."""
        return sum(node.gpus for node in self.nodes)

    def gpus_by_card(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for node in self.nodes:
            totals[node.card_type] += node.gpus
        return dict(sorted(totals.items()))

    def max_gpus_by_card(self) -> dict[str, int]:
        """Largest node per card type (a task spanning nodes may still use more)."""
        largest: dict[str, int] = {}
        for node in self.nodes:
            largest[node.card_type] = max(largest.get(node.card_type, 0), node.gpus)
        return largest

    def empty_nodes(self) -> tuple[Node, ...]:
        """The fleet with every GPU free, as the scheduling core's `Node`s."""
        return tuple(Node(n.node_id, n.card_type, n.gpus, frozenset(range(n.gpus))) for n in self.nodes)

    def summary(self) -> str:
        """`H100: 128 GPUs on 16 nodes, ...`."""
        per_card: Counter[str] = Counter(node.card_type for node in self.nodes)
        gpus = self.gpus_by_card()
        return ", ".join(f"{card}: {gpus[card]} GPUs on {per_card[card]} nodes" for card in gpus)


def nodes_from_rows(rows: Iterable[tuple[str, str, int]], description: str) -> Cluster:
    """A cluster from `(node_id, card_type, gpus)` rows; rejects duplicates and empty fleets."""
    nodes = tuple(ClusterNode(node_id, card, int(gpus)) for node_id, card, gpus in rows if int(gpus) > 0)
    if not nodes:
        raise ValueError(f"cluster {description!r} has no GPU node")
    if len({node.node_id for node in nodes}) != len(nodes):
        raise ValueError(f"cluster {description!r} repeats a node id")
    return Cluster(nodes=nodes, description=description)


def parse_cluster_spec(spec: str) -> Cluster:
    """`H100:16x8,A100-80G:8x8` = 16 nodes of 8 H100 plus 8 nodes of 8 A100-80G."""
    rows: list[tuple[str, str, int]] = []
    for part in spec.split(","):
        match = _SPEC_PART.match(part)
        if not match:
            raise ValueError(f"bad cluster spec part {part!r}; expected CARD:NODESxGPUS, e.g. H100:16x8")
        card, count, gpus = match["card"], int(match["nodes"]), int(match["gpus"])
        rows.extend((f"{card}-{index:04d}", card, gpus) for index in range(count))
    return nodes_from_rows(rows, spec)


def load_cluster_csv(path: Path) -> Cluster:
    """A CSV with columns `node_id,card_type,gpus`."""
    with path.open(newline="") as handle:
        rows = [(r["node_id"].strip(), r["card_type"].strip(), int(r["gpus"])) for r in csv.DictReader(handle)]
    return nodes_from_rows(rows, path.name)


def load_cluster(spec_or_path: str) -> Cluster:
    """A file path (CSV) if it exists, else a spec string."""
    path = Path(spec_or_path)
    if path.suffix.lower() == ".csv" or path.is_file():
        return load_cluster_csv(path)
    return parse_cluster_spec(spec_or_path)


def size_for_load(demand_gpu_s: float, window_s: float, card: str, gpus_per_node: int = 8,
                  target_load: float = 1.0, min_nodes: int = 1) -> Cluster:
    """The cluster of `card` nodes whose offered load is closest to `target_load`.

    Offered load = demand GPU-seconds / (capacity x window); nodes = round(demand / (target x window x
    GPUs per node)), at least `min_nodes`. The real load after rounding is stated in the description.
    """
    if window_s <= 0:
        raise ValueError("window must be positive to size a cluster")
    nodes = max(min_nodes, math.floor(demand_gpu_s / (target_load * window_s * gpus_per_node) + 0.5))
    load = demand_gpu_s / (nodes * gpus_per_node * window_s)
    cluster = parse_cluster_spec(f"{card}:{nodes}x{gpus_per_node}")
    return Cluster(cluster.nodes, f"{card}:{nodes}x{gpus_per_node} (sized for offered load {load:.0%})")
