"""bench/fragmentation.py: the fragmentation-free pool holds the same GPUs per card type on one node."""

from __future__ import annotations

from shared.simulation.cluster import parse_cluster_spec
from tests.helpers.bench_scripts import load_bench_script

fragmentation = load_bench_script("fragmentation")


def test_the_pool_keeps_every_gpu_of_each_card_type_on_one_node() -> None:
    nodes = parse_cluster_spec("V100:3x8,T4:2x4")
    pool = fragmentation.pooled_cluster(nodes)
    assert [(n.card_type, n.gpus) for n in pool.nodes] == [("T4", 8), ("V100", 24)]
    assert pool.capacity == nodes.capacity == 32 and pool.gpus_by_card() == nodes.gpus_by_card()
    assert pool.max_gpus_by_card() == {"T4": 8, "V100": 24}  # nothing is split by a node any more
