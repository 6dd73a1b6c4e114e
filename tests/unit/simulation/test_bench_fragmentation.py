"""bench/fragmentation.py: the fragmentation-free pool holds the same GPUs per card type on one node."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from shared.simulation.cluster import parse_cluster_spec

_BENCH = Path(__file__).resolve().parents[3] / "bench"
sys.path.insert(0, str(_BENCH))  # the script imports its bench/ neighbours by name
_SPEC = importlib.util.spec_from_file_location("fragmentation", _BENCH / "fragmentation.py")
fragmentation = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("fragmentation", fragmentation)
_SPEC.loader.exec_module(fragmentation)


def test_the_pool_keeps_every_gpu_of_each_card_type_on_one_node() -> None:
    nodes = parse_cluster_spec("V100:3x8,T4:2x4")
    pool = fragmentation.pooled_cluster(nodes)
    assert [(n.card_type, n.gpus) for n in pool.nodes] == [("T4", 8), ("V100", 24)]
    assert pool.capacity == nodes.capacity == 32 and pool.gpus_by_card() == nodes.gpus_by_card()
    assert pool.max_gpus_by_card() == {"T4": 8, "V100": 24}  # nothing is split by a node any more
