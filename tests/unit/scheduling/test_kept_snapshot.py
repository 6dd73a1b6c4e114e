"""A snapshot kept between cycles (`KeptSnapshot`) keeps exactly what a fresh one would derive, and plans alike.

Table tests change one thing at a time (a lease ends, starts, is preempted or checkpoints; a node's free GPUs
change; a node joins, leaves or changes its card type) and compare the kept layout and lease index with the
ones built from scratch from the same nodes and leases. A hypothesis property runs generated sequences of
cycles — each plan's grants start, its victims and some other leases end, leases checkpoint, nodes join or
leave — and after every step compares the kept parts with fresh ones, and `plan()` over the kept snapshot with
`plan()` over a plain `Snapshot` of the same nodes, leases and quotas.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling.cycle import Cycle
from shared.scheduling.kept_snapshot import KeptSnapshot
from shared.scheduling.model import CardOption, Node, Plan, PriorityClass, QueuedTask, RunningLease, Snapshot
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from tests.unit.scheduling.test_properties import NOW, scenarios

CORE, STANDARD, OPPORTUNISTIC = PriorityClass.CORE, PriorityClass.STANDARD, PriorityClass.OPPORTUNISTIC


def a_lease(lease_id: str, node_id: str, gpus: tuple[int, ...], cls: PriorityClass = STANDARD, card: str = "H100",
            end: float = NOW + 3600.0, **more) -> RunningLease:
    return RunningLease(lease_id, f"task-{lease_id}", "p", cls, node_id, card, gpus, NOW - 600.0, end, **more)


def fleet() -> KeptSnapshot:
    nodes = (Node("n2", "A10", 4, frozenset({3})), Node("n1", "H100", 8, frozenset({6, 7})), Node("n3", "H100", 8, frozenset()))
    leases = (a_lease("a", "n1", (0, 1, 2, 3)), a_lease("b", "n1", (4, 5), OPPORTUNISTIC),
              a_lease("c", "n2", (0, 1, 2), CORE, "A10"), a_lease("d", "n3", tuple(range(8)), CORE))
    return KeptSnapshot(nodes, leases)


def assert_kept_as_fresh(kept: KeptSnapshot) -> None:
    """The kept layout, lease index and sorted free GPUs equal those `of` builds from the same nodes and leases."""
    fresh = KeptSnapshot.of(Snapshot(tuple(kept.nodes), tuple(kept.leases), kept.quotas))
    assert kept.nodes == fresh.nodes
    assert kept.free_sorted == fresh.free_sorted == tuple(tuple(sorted(node.free)) for node in kept.nodes)
    assert kept.layout.key == fresh.layout.key
    assert kept.layout.rank_of == fresh.layout.rank_of and kept.layout.pool_ranks == fresh.layout.pool_ranks
    assert kept.index == fresh.index
    assert kept.fleet_start == fresh.fleet_start


def test_the_nodes_are_kept_in_rank_order_and_the_leases_grouped_by_their_nodes_card_type() -> None:
    kept = fleet()
    assert [node.node_id for node in kept.nodes] == ["n1", "n2", "n3"]
    assert kept.layout.pool_ranks == {"H100": (0, 2), "A10": (1,)}
    assert [lease_id for _, lease_id in kept.index.releases["H100"]] == ["a", "d"]  # sorted by release: same end, rank
    assert list(kept.index.opportunistic["H100"]) == ["b"]
    assert {card: list(group) for card, group in kept.index.core.items()} == {"A10": ["c"], "H100": ["d"]}


@pytest.mark.parametrize("change", [
    "a lease ends", "an opportunistic lease is preempted", "a core lease ends", "a lease starts",
    "a lease checkpoints", "a node's free GPUs change", "a node joins", "a node leaves", "a node changes card type",
    "every lease of a card type ends",
])
def test_after_one_change_the_kept_parts_equal_fresh_ones(change: str) -> None:
    kept = fleet()
    changed = {
        "a lease ends": lambda: kept.changed([replace(kept.nodes[0], free=frozenset({0, 1, 2, 3, 6, 7}))], removed=["a"]),
        "an opportunistic lease is preempted": lambda: kept.changed(removed=["b"]),
        "a core lease ends": lambda: kept.changed(removed=["c"]),
        "a lease starts": lambda: kept.changed([replace(kept.nodes[0], free=frozenset())],
                                               [a_lease("e", "n1", (6, 7), OPPORTUNISTIC, checkpoints_on_preempt=True)]),
        "a lease checkpoints": lambda: kept.changed(added=[replace(kept.leases[1], last_checkpoint_at=NOW)], removed=["b"]),
        "a node's free GPUs change": lambda: kept.changed([replace(kept.nodes[1], free=frozenset({2, 3}))]),
        "a node joins": lambda: kept.changed([Node("n0", "A10", 4, frozenset({0}))], [a_lease("e", "n0", (1, 2, 3), card="A10")]),
        "a node leaves": lambda: kept.changed(removed_nodes=["n1"]),
        "a node changes card type": lambda: kept.changed([Node("n3", "A10", 8, frozenset())]),
        "every lease of a card type ends": lambda: kept.changed(removed=["c"]).changed(removed=["a", "b", "d"]),
    }[change]()
    assert_kept_as_fresh(changed)
    assert_kept_as_fresh(kept)  # a value: the one it was made from is unchanged
    assert kept.index == fleet().index


def test_a_lease_on_a_node_the_snapshot_lacks_is_not_indexed_until_the_node_joins() -> None:
    kept = fleet().changed(added=[a_lease("e", "n9", (0,), OPPORTUNISTIC)])
    assert "e" in {lease.lease_id for lease in kept.leases}
    assert "e" not in {lease.lease_id for lease in kept.index.opportunistic_leases()}
    joined = kept.changed([Node("n9", "T4", 1, frozenset())])
    assert "e" in {lease.lease_id for lease in joined.index.opportunistic_leases()}
    assert_kept_as_fresh(joined)


def test_changes_that_do_not_fit_the_kept_snapshot_are_refused() -> None:
    kept = fleet()
    with pytest.raises(ValueError, match="not running"):
        kept.changed(removed=["zz"])
    with pytest.raises(ValueError, match="running already"):
        kept.changed(added=[a_lease("a", "n1", (6,))])
    with pytest.raises(ValueError, match="unique"):
        KeptSnapshot(kept.nodes, (*kept.leases, kept.leases[0]))


def test_copies_and_pickles_are_kept_snapshots_again() -> None:
    kept = fleet()
    for copy in (pickle.loads(pickle.dumps(kept)), replace(kept, quotas={})):
        assert isinstance(copy, KeptSnapshot)
        assert_kept_as_fresh(copy)
        assert copy.index == kept.index


def apply(snapshot: Snapshot, decided: Plan, draw, step: int) -> tuple[list[Node], list[RunningLease], list[str], list[str]]:
    """The next cycle's changes after `decided`: its grants start, its victims and some drawn leases end, some
    drawn leases checkpoint, maybe a node leaves or an empty one joins. Returns (changed or new nodes, added
    leases, ended lease ids, nodes gone)."""
    nodes = {node.node_id: node for node in snapshot.nodes}
    leases = {lease.lease_id: lease for lease in snapshot.leases}
    ids = sorted(leases)
    ending = {preemption.lease_id for preemption in decided.preemptions}
    ending |= set(draw(st.lists(st.sampled_from(ids), unique=True, max_size=3))) if ids else set()
    touched: set[str] = set()
    for lease_id in sorted(ending):
        lease = leases[lease_id]
        if lease.node_id in nodes:
            node = nodes[lease.node_id]
            nodes[lease.node_id] = replace(node, free=node.free | set(lease.gpu_indices),
                                           heavy_running=max(0, node.heavy_running - lease.heavy))
            touched.add(lease.node_id)
    added = []
    for grant in decided.grants:
        for number, placement in enumerate(grant.placements):
            node = nodes[placement.node_id]
            nodes[placement.node_id] = replace(node, free=node.free - set(placement.gpu_indices))
            touched.add(placement.node_id)
            added.append(RunningLease(f"g{step}-{grant.task_id}-{number}", grant.task_id, "p0",
                                      draw(st.sampled_from(tuple(PriorityClass))), placement.node_id, grant.card_type,
                                      placement.gpu_indices, NOW, grant.estimated_end,
                                      checkpoints_on_preempt=draw(st.booleans()),
                                      borrowed_headroom=grant.borrowed_headroom or draw(st.booleans())))
    staying = [lease_id for lease_id in ids if lease_id not in ending]
    for lease_id in draw(st.lists(st.sampled_from(staying), unique=True, max_size=2)) if staying else []:
        ending.add(lease_id)
        added.append(replace(leases[lease_id], last_checkpoint_at=NOW + step))
    gone = []
    if draw(st.integers(0, 5)) == 0 and len(nodes) > 1:
        gone = [draw(st.sampled_from(sorted(nodes)))]
        touched.discard(gone[0])
    if draw(st.integers(0, 5)) == 0:
        size = draw(st.sampled_from((2, 4, 8)))
        joined = Node(f"new{step}", draw(st.sampled_from(("H100", "A10", "T4"))), size, frozenset(range(size)))
        nodes[joined.node_id] = joined
        touched.add(joined.node_id)
    return [nodes[node_id] for node_id in sorted(touched)], added, sorted(ending), gone


def plain_after(snapshot: Snapshot, nodes: list[Node], added: list[RunningLease], ended: list[str],
                gone: list[str]) -> Snapshot:
    """The same change made to a plain snapshot."""
    by_id = {node.node_id: node for node in snapshot.nodes if node.node_id not in gone}
    by_id.update((node.node_id, node) for node in nodes)
    leases = [lease for lease in snapshot.leases if lease.lease_id not in set(ended)] + added
    return Snapshot(tuple(by_id.values()), tuple(leases), snapshot.quotas)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(), data=st.data())
def test_kept_through_cycles_it_equals_a_fresh_snapshot_and_plans_alike(scenario, data) -> None:
    snapshot, queue, policy = scenario
    kept = KeptSnapshot.of(snapshot)
    now = NOW
    for step in range(data.draw(st.integers(1, 5))):
        decided = plan(snapshot, queue, policy, now)
        assert plan(kept, queue, policy, now) == decided
        nodes, added, ended, gone = apply(snapshot, decided, data.draw, step)
        snapshot = plain_after(snapshot, nodes, added, ended, gone)
        kept = kept.changed(nodes, added, ended, gone)
        assert_kept_as_fresh(kept)
        assert sorted(kept.leases, key=lambda lease: lease.lease_id) == sorted(snapshot.leases, key=lambda lease: lease.lease_id)
        granted = {grant.task_id for grant in decided.grants}
        queue = [task for task in queue if task.task_id not in granted]
        now += data.draw(st.sampled_from((0.0, 30.0, 900.0)))
    assert plan(kept, queue, policy, now) == plan(snapshot, queue, policy, now)


def test_the_cardflow_plan_over_a_kept_snapshot_reserves_and_preempts_as_over_a_plain_one() -> None:
    snapshot = fleet().changed(added=[replace(fleet().leases[1], lease_id="b2", checkpoints_on_preempt=True)],
                               removed=["b"])
    queue = [QueuedTask("core", "p", CORE, 0, 4, NOW - 3600.0, (CardOption("H100", 7200.0, 1.0),)),
             QueuedTask("wide", "p", STANDARD, 0, 8, NOW - 60.0, (CardOption("H100", 600.0, 1.0),)),
             QueuedTask("small", "p", OPPORTUNISTIC, 0, 1, NOW, (CardOption("A10", 600.0, 1.0),))]
    policy = POLICIES["cardflow"]
    decided = plan(snapshot, queue, policy, NOW)
    assert [p.lease_id for p in decided.preemptions] == ["b2"] and decided.reservations and decided.grants
    assert decided == plan(Snapshot(snapshot.nodes, snapshot.leases, snapshot.quotas), queue, policy, NOW)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios(), data=st.data())
def test_the_reservations_lease_releases_over_a_kept_snapshot_are_the_plain_ones(scenario, data) -> None:
    """The sweep's releases per card type (as a multiset: it sorts them) and the yielding leases, for any card
    types, leases preempted this cycle (opportunistic ones; standard ones too where the policy makes them victims)
    and `yield_at` — also for policies whose borrowing depends on `now`."""
    snapshot, _, policy = scenario
    policy = replace(policy, headroom_counts_reclaimable_only=data.draw(st.booleans()))
    standard_victims = policy.preemption and (policy.checkpointing_standard_borrows or policy.checkpointing_standard_yields)
    victims = sorted(lease.lease_id for lease in snapshot.leases
                     if lease.priority_class == OPPORTUNISTIC or (standard_victims and lease.priority_class == STANDARD))
    preempted = set(data.draw(st.lists(st.sampled_from(victims), unique=True))) if victims else set()
    card_types = set(data.draw(st.lists(st.sampled_from(("H100", "A10", "T4")), unique=True, min_size=1)))
    yield_at = data.draw(st.one_of(st.none(), st.sampled_from((NOW, NOW + 600.0, NOW + 7200.0))))
    found = []
    for given_snapshot in (snapshot, KeptSnapshot.of(snapshot)):
        cycle = Cycle(given_snapshot, policy, NOW)
        cycle._preempted.update(preempted)
        releases = cycle._lease_releases(card_types, yield_at)
        found.append({card_type: sorted(items) for card_type, items in releases.items() if items})
    assert found[0] == found[1]


@pytest.mark.parametrize("victims", [dict(checkpointing_standard_yields=True), dict(checkpointing_standard_borrows=True)])
def test_a_standard_victim_preempted_this_cycle_frees_nothing_twice_in_the_reservation_over_a_kept_snapshot(victims):
    """Node n0 (2 GPUs): a standard lease that checkpoints (due now) and a core lease ending in 1 s. The core task past
    its grace preempts the standard lease and will run on its GPU; the next core task reserves for when the core lease
    ends — over a kept snapshot too, whose lease index keeps standard releases as they are (found by the property
    below: the kept plan counted the victim's GPU free at its estimated end as well, and reserved for now)."""
    standard = a_lease("s", "n0", (0,), STANDARD, end=NOW, checkpoints_on_preempt=True,
                       borrowed_headroom="checkpointing_standard_borrows" in victims)
    leases = (standard, a_lease("c", "n0", (1,), CORE, end=NOW + 1.0))
    nodes = (Node("n0", "H100", 2, frozenset()),)
    option = (CardOption("H100", 60.0, 1.0),)
    queue = [QueuedTask("late", "p", CORE, 0, 1, NOW, option), QueuedTask("due", "p", CORE, 0, 1, NOW - 600.0, option)]
    policy = replace(POLICIES["cardflow"], headroom=0.0, backfill=False, **victims)
    fresh = plan(Snapshot(nodes, leases), queue, policy, NOW)
    assert [p.lease_id for p in fresh.preemptions] == ["s"]
    assert [(r.task_id, r.start_at) for r in fresh.reservations] == [("late", NOW + 1.0)]
    assert plan(KeptSnapshot(nodes, leases), queue, policy, NOW) == fresh
