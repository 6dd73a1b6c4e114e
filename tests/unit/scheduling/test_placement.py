"""Placement: card options in matcher order, best-fit packing, spanning, heavy-task spreading."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.scheduling.model import DeferralReason as R
from shared.scheduling.model import Node
from shared.scheduling.placement import Fleet, gpus_unlimited, span_allocation

from .builders import a_lease, a_node, a_task, deferrals, grants, nodes_of, reason_of, run


def place(nodes, *tasks, **policy):
    policy.setdefault("headroom", 0.0)
    return run(nodes, tasks, **policy)


@pytest.mark.parametrize(
    ("free", "gpus", "expected"),
    [
        ({"a": 8, "b": 3, "c": 4}, 3, "b"),  # exact fit
        ({"a": 8, "b": 2, "c": 4}, 3, "c"),  # fewest free that still fits
        ({"a": 8, "b": 2, "c": 2}, 3, "a"),  # only the big one fits
        ({"b": 4, "a": 4, "c": 5}, 4, "a"),  # ties: lowest node id
    ],
)
def test_best_fit_takes_the_node_with_the_fewest_free_gpus_that_fits(free, gpus, expected):
    nodes = [a_node(node_id).free(count) for node_id, count in free.items()]
    result = place(nodes, a_task("t").gpus(gpus))
    assert nodes_of(grants(result)["t"]) == [expected]


def test_lowest_free_gpu_indices_are_granted():
    result = place([a_node("n").free_indices(1, 5, 6, 7)], a_task("t").gpus(2))
    assert grants(result)["t"].placements[0].gpu_indices == (1, 5)


def test_successive_tasks_pack_one_node_before_opening_the_next():
    tasks = [a_task(f"t{i}").submitted(i) for i in range(3)]
    result = place([a_node("a").free(8), a_node("b").free(8)], *tasks)
    assert {tuple(nodes_of(grant)) for grant in result.grants} == {("a",)}


def test_card_options_are_tried_in_matcher_order():
    nodes = [a_node("h").card("H100"), a_node("a").card("A100-80G")]
    assert grants(place(nodes, a_task("t").on("A100-80G", "H100")))["t"].card_type == "A100-80G"
    nodes = [a_node("h").card("H100"), a_node("a").card("A100-80G").free(0)]
    assert grants(place(nodes, a_task("t").on("A100-80G", "H100")))["t"].card_type == "H100"


def test_estimated_end_uses_the_runtime_on_the_granted_card():
    nodes = [a_node("h").card("H100"), a_node("a").card("A100-80G").free(0)]
    result = place(nodes, a_task("t").on(("A100-80G", 200.0), ("H100", 100.0)), now=1000.0)
    assert grants(result)["t"].estimated_end == 1100.0


def test_a_task_that_fits_one_node_is_never_split():
    result = place([a_node("a").free(3), a_node("b").free(3)], a_task("t").gpus(4))
    assert reason_of(result, "t") == R.NO_CAPACITY
    assert deferrals(result)["t"].detail == "needs 4 GPUs of H100 on one node; largest free block: H100 3"


def test_a_task_larger_than_any_node_spans_the_fewest_nodes_whole_free_first():
    nodes = [a_node("a").free(8), a_node("b").free(5), a_node("c").free(8), a_node("d").free(3)]
    result = place(nodes, a_task("t").gpus(19))
    placements = {p.node_id: len(p.gpu_indices) for p in grants(result)["t"].placements}
    assert placements == {"a": 8, "c": 8, "d": 3}  # the remainder 3 goes to the best fit, d


def test_spanning_fails_when_the_type_has_too_few_free_gpus():
    result = place([a_node("a").free(8), a_node("b").free(7)], a_task("t").gpus(16))
    assert reason_of(result, "t") == R.NO_CAPACITY
    assert "across nodes" in deferrals(result)["t"].detail


def test_heavy_tasks_are_spread_up_to_the_limit_per_node():
    tasks = [a_task(f"h{i}").heavy().submitted(i) for i in range(3)]
    result = place([a_node("a").free(8), a_node("b").free(8)], *tasks, max_heavy_per_node=2)
    placed = [nodes_of(grants(result)[f"h{i}"])[0] for i in range(3)]
    assert placed == ["a", "a", "b"]


def test_heavy_task_waits_when_every_node_with_room_holds_max_heavy_tasks():
    result = place([a_node("a").heavy(2)], a_task("h").heavy(), max_heavy_per_node=2)
    assert reason_of(result, "h") == R.HEAVY_SPREAD
    assert "fewer than 2" in deferrals(result)["h"].detail
    light = place([a_node("a").heavy(2)], a_task("l"), max_heavy_per_node=2)
    assert "l" in grants(light)


def test_card_types_absent_from_the_fleet():
    result = place([a_node("h").card("H100")], a_task("t").on("T4"))
    assert reason_of(result, "t") == R.NO_CAPACITY
    assert deferrals(result)["t"].detail == "none of its card types (T4) is in the fleet"
    assert not result.reservations


def test_the_fleet_version_moves_with_free_gpus_and_failure_caches() -> None:
    """`Fleet.version` (which lets the walk keep a shape's `may_have_room` answer) grows on every change of
    what that answer reads: GPUs taken or held, a failure cache tightened by a request that found no node."""
    fleet = Fleet([Node("n0", "H100", 8, frozenset(range(4))), Node("n1", "H100", 8, frozenset(range(2)))], 2,
                  lambda card_type, total: 0)
    pool = fleet.pools["H100"]
    assert fleet.may_have_room(3, False, ["H100"]) and not fleet.may_have_room(7, False, ["H100"])
    version = fleet.version
    fleet.take(fleet.place(pool, 1, False), False)
    assert fleet.version > version
    version = fleet.version
    assert fleet.place(pool, 5, False) is None  # 5 of 5 free, but not on one node: remembered
    assert fleet.version > version and not fleet.may_have_room(5, False, ["H100"])
    version = fleet.version
    fleet.hold(0, 1)
    assert fleet.version > version
    version = fleet.version
    assert fleet.place(pool, 2, False) is not None and fleet.version == version  # a query changes nothing


def _rooms_of_every_node(fleet: Fleet, pool, heavy: bool, limit) -> list[tuple[int, int]]:
    """`Fleet._rooms` as it was first written: every node of the pool, its usable free GPUs capped by `limit`."""
    rooms = sorted((-min(fleet.usable_free(rank, heavy), limit.get(rank, gpus_unlimited)), rank) for rank in pool.ranks)
    return [(rank, -neg_room) for neg_room, rank in rooms if neg_room < 0]

def _changed_fleet(free: list[int], steps: list, ask_heavy_first: bool) -> Fleet:
    """An H100 pool of nodes with these free counts (and an A10 node), after these takes and holds."""
    nodes = [Node(f"n{index:02d}", "H100", 8, frozenset(range(count))) for index, count in enumerate(free)]
    nodes.append(Node("other", "A10", 8, frozenset(range(8))))
    fleet = Fleet(nodes, 1, lambda card_type, total: 0)
    if ask_heavy_first:
        fleet.largest_free(fleet.pools["H100"], True)  # the heavy buckets built before the changes
    for kind, node, count, heavy_take in steps:
        rank = fleet.rank_of.get(f"n{node:02d}")
        if rank is None or fleet.free_count[rank] < count:
            continue
        if kind == "take":
            fleet.take([(rank, count)], heavy_take)
        else:
            fleet.hold(rank, count)
    return fleet


_STEPS = st.lists(st.tuples(st.sampled_from(["take", "hold"]), st.integers(0, 11), st.integers(1, 8), st.booleans()),
                  max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    free=st.lists(st.integers(0, 8), min_size=1, max_size=12),
    steps=st.lists(st.tuples(st.sampled_from(["take", "hold"]), st.integers(0, 11), st.integers(1, 8),
                             st.booleans()), max_size=12),
    caps=st.dictionaries(st.integers(0, 13), st.integers(-2, 9), max_size=4),
    heavy=st.booleans(),
    ask_heavy_first=st.booleans(),
)
def test_rooms_of_a_spanning_task_under_a_limit_are_every_node_with_room(free, steps, caps, heavy,
                                                                         ask_heavy_first) -> None:
    """A guarded spanning task's rooms (`Fleet._rooms`, read from the bucket heaps) are, after any takes and
    holds, exactly every node of the pool with usable free GPUs, capped by the limit, most room first, then
    rank — including nodes of another card type named by the limit (left out) and caps above the free count."""
    fleet = _changed_fleet(free, steps, ask_heavy_first)  # the heavy buckets kept up to date by the changes
    pool = fleet.pools["H100"]
    limit = {fleet.rank_of["other" if node == 13 else f"n{node:02d}"]: cap for node, cap in caps.items()
             if node == 13 or node < len(free)}
    assert fleet._rooms(pool, heavy, limit) == _rooms_of_every_node(fleet, pool, heavy, limit)


def test_capacity_sentences_after_a_grant_name_the_largest_free_block_left_and_never_fits_only_by_gpus() -> None:
    """Capacity sentences said from the cycle's caches (`Explainer`: a card type's largest free block kept while
    its pool's free GPUs stand, `never_fits` kept per GPUs and card types): behind an A10 reservation, a 4-GPU
    H100 task finds no node (largest block 3), a 3-GPU one takes that block, the next 4-GPU one is told the block
    left (2); a 100-GPU task can never start, a 5-GPU one of the same card type can, later."""
    nodes = [a_node("a0").card("A10").free(0), a_node("h0").free(3), a_node("h1").free(2)]
    tasks = [a_task("head").on("A10").gpus(8).priority(9), a_task("a").gpus(4).priority(8),
             a_task("b").gpus(3).priority(7), a_task("c").gpus(4).priority(6), a_task("d").gpus(100).priority(5),
             a_task("e").gpus(5).priority(4)]
    result = place(nodes, *tasks, leases=[a_lease("L").on("a0", "A10").gpus(*range(8))])
    assert list(grants(result)) == ["b"]
    said = {task_id: deferral.detail for task_id, deferral in deferrals(result).items()}
    assert said["a"] == "needs 4 GPUs of H100 on one node; largest free block: H100 3"
    assert said["c"] == "needs 4 GPUs of H100 on one node; largest free block: H100 2"
    assert said["d"] == "can never start: needs 100 GPUs, but at most H100 16 can ever be used by it"
    assert said["e"] == "needs 5 GPUs of H100 on one node; largest free block: H100 2"



@settings(max_examples=300, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=12), steps=_STEPS, heavy=st.booleans(),
       ask_heavy_first=st.booleans(), wanted=st.lists(st.integers(9, 60), min_size=1, max_size=4))
def test_a_spanning_task_gets_the_whole_nodes_with_most_room_then_the_best_fit_as_if_every_node_were_read(
        free, steps, heavy, ask_heavy_first, wanted) -> None:
    """`Fleet.place` of a task wider than any node (`_span`, which reads only as many of a bucket's nodes as it
    takes: `_lowest_valid`) gives what the rule gives over every node of the pool (`span_allocation` of their
    rooms, most room first, then rank; the last node the best fit for the remainder), after any takes and
    holds, and again after each spanning grant."""
    fleet = _changed_fleet(free, steps, ask_heavy_first)
    pool = fleet.pools["H100"]
    for gpus in sorted(wanted):
        expected = span_allocation(_rooms_of_every_node(fleet, pool, heavy, {}), gpus)
        allocation = fleet.place(pool, gpus, heavy)
        assert allocation == expected
        if allocation is not None:
            fleet.take(allocation, heavy)


@settings(max_examples=300, deadline=None)
@given(free=st.lists(st.integers(0, 8), min_size=1, max_size=12), steps=_STEPS, heavy=st.booleans(),
       ask_heavy_first=st.booleans())
def test_the_largest_free_block_asked_from_the_one_before_is_the_largest_free_block(free, steps, heavy,
                                                                                    ask_heavy_first) -> None:
    """`Fleet.largest_free(pool, heavy, at_most)` from the block found earlier in the cycle (what the capacity
    sentences pass) equals the block found from the top, after each take or hold: it only shrinks."""
    fleet = _changed_fleet(free, [], ask_heavy_first)
    pool = fleet.pools["H100"]
    before = fleet.largest_free(pool, heavy)
    for step in steps:
        rank = fleet.rank_of.get(f"n{step[1]:02d}")
        if rank is None or fleet.free_count[rank] < step[2]:
            continue
        fleet.take([(rank, step[2])], step[3]) if step[0] == "take" else fleet.hold(rank, step[2])
        largest = max([fleet.usable_free(rank, heavy) for rank in pool.ranks])
        assert fleet.largest_free(pool, heavy, before) == largest == fleet.largest_free(pool, heavy)
        before = largest
