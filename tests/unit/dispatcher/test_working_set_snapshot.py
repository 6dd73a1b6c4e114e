"""The working set's snapshot is kept between cycles (`WorkingSet.snapshot`, a `KeptSnapshot`): after any
sequence of committed changes it equals what `build_snapshot` and a fresh `KeptSnapshot` give for the same
records — nodes, running leases, quotas (each account's promised GPU-seconds kept, `KeptPromises`, while leases
start, end, move their estimated end, change project or card type, pass their estimated end or their
account's window edges, and accounts are adjusted), and the layout and lease index kept beside."""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.dispatcher.working_set import WorkingSet
from shared.events.reasons import ReleaseReason, RevokeReason
from shared.events.states import TaskState
from shared.leasing.records import LeaseState, QuotaRecord
from shared.leasing.snapshot import build_snapshot
from shared.leasing.work import BookChanges
from shared.scheduling.kept_snapshot import KeptSnapshot
from shared.scheduling.model import PriorityClass
from tests.unit.dispatcher.builders import NOW, a_lease_record, a_node_record, a_task_record

TASKS = [f"T{i}" for i in range(4)]
NODES = [f"n{i}" for i in range(4)]
ACCOUNT = QuotaRecord("acct", "proj-a", 10.0, None, NOW - timedelta(days=1), NOW + timedelta(days=1))
ACCOUNTS = {"acct": ACCOUNT,  # and two whose windows open and close while leases run
            "acct-h100": QuotaRecord("acct-h100", "proj-a", 2.0, "H100", NOW + timedelta(minutes=2),
                                     NOW + timedelta(minutes=12)),
            "acct-b": QuotaRecord("acct-b", "proj-b", 1.0, None, NOW - timedelta(minutes=5), NOW + timedelta(minutes=7))}


def a_working_set() -> WorkingSet:
    return WorkingSet(tasks={task_id: a_task_record(task_id) for task_id in TASKS},
                      leases={"L0": a_lease_record("L0", "T0", node_id="n0", gpus=(0, 1))},
                      nodes={node_id: a_node_record(node_id, gpus=4) for node_id in NODES}, accounts=dict(ACCOUNTS))


def assert_kept_as_fresh(state: WorkingSet, now: float) -> None:
    kept = state.snapshot(now)
    fresh = KeptSnapshot.of(build_snapshot(state.nodes.values(), state.leases.values(), state.tasks,
                                           state.accounts.values(), now))
    assert kept.nodes == fresh.nodes
    by_id = attrgetter("lease_id")
    assert sorted(kept.leases, key=by_id) == sorted(fresh.leases, key=by_id)  # plan() reads them in any order
    assert kept.quotas == fresh.quotas
    assert kept.layout.key == fresh.layout.key and kept.layout.pool_ranks == fresh.layout.pool_ranks
    assert kept.index == fresh.index


def a_change(state: WorkingSet, draw, serial: int) -> BookChanges:
    """One committed step's changes, drawn over the working set as it is."""
    active = sorted(state.leases)
    kind = draw(st.sampled_from(["grant", "grant", "end", "preempt", "revoke", "renew", "checkpoint", "task", "node"]
                                if active else ["grant", "task", "node"]))
    if kind == "grant":
        task_id = draw(st.sampled_from(TASKS))
        task = replace(state.tasks.get(task_id) or a_task_record(task_id), heavy=draw(st.booleans()),
                       priority_class=draw(st.sampled_from(list(PriorityClass))))
        lease = a_lease_record(f"G{serial}", task_id, node_id=draw(st.sampled_from(NODES)),
                               gpus=draw(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True)),
                               card_type=draw(st.sampled_from(["H100", "A10"])),
                               estimated_end=NOW + timedelta(minutes=draw(st.integers(-2, 20))))
        return BookChanges(tasks={task_id: task}, leases={lease.lease_id: lease})
    if kind == "task":
        task_id = draw(st.sampled_from(TASKS))
        task = state.tasks.get(task_id) or a_task_record(task_id)
        project = draw(st.sampled_from(["proj-a", "proj-b"]))
        return BookChanges(tasks={task_id: replace(task, heavy=not task.heavy, project=project)})
    if kind == "node":
        node = replace(state.nodes[draw(st.sampled_from(NODES))], gpus=draw(st.sampled_from([2, 4])),
                       card_type=draw(st.sampled_from(["H100", "A10"])), alive=draw(st.booleans()),
                       drained=draw(st.booleans()))
        return BookChanges(nodes={node.node_id: node})
    lease = state.leases[draw(st.sampled_from(active))]
    if kind == "end":
        return BookChanges(leases={lease.lease_id: replace(lease, state=LeaseState.ENDED, ended_at=NOW,
                                                             end_reason=ReleaseReason.SUCCEEDED)})
    if kind == "preempt":
        return BookChanges(leases={lease.lease_id: replace(lease, preempting=True, preempted_for="T3")})
    if kind == "revoke":
        reason = draw(st.sampled_from(list(RevokeReason)))
        return BookChanges(leases={lease.lease_id: replace(lease, revoke_reason=reason)})
    if kind == "renew":
        renewed = replace(lease, renewals_unreported=lease.renewals_unreported + 1)
        return BookChanges(quiet_leases={lease.lease_id: renewed})
    return BookChanges(leases={lease.lease_id: replace(lease, last_checkpoint_at=NOW,
                                                       estimated_end=lease.estimated_end + timedelta(minutes=1))})


def accounts_changed(state: WorkingSet, draw, serial: int) -> dict[str, QuotaRecord]:
    """The usage an account counted grows; sometimes an account is adjusted (its window moved, or it covers
    one card type more or less)."""
    changed = {"acct": replace(state.accounts["acct"], used_gpu_seconds=serial)}
    if draw(st.integers(0, 4)) == 0:
        account = state.accounts[draw(st.sampled_from(sorted(state.accounts)))]
        moved = timedelta(minutes=draw(st.sampled_from([0, -3, 4])))
        changed[account.account_id] = replace(account, valid_from=account.valid_from + moved,
                                              valid_to=account.valid_to + moved,
                                              card_type=draw(st.sampled_from([account.card_type, None, "A10"])))
    return changed


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_kept_snapshot_equals_a_fresh_one_after_any_changes(data) -> None:
    state, now = a_working_set(), NOW.timestamp()
    assert_kept_as_fresh(state, now)
    serial = 0
    for _ in range(data.draw(st.integers(1, 25))):
        for _ in range(data.draw(st.integers(1, 3))):  # a few steps between cycles
            serial += 1  # lease ids are never reused
            state.apply(a_change(state, data.draw, serial), accounts=accounts_changed(state, data.draw, serial))
        now += data.draw(st.sampled_from([0.0, 30.0, 30.0, 240.0, -30.0]))  # the clock may step back
        assert_kept_as_fresh(state, now)


def test_the_kept_snapshot_is_reused_and_a_new_working_set_builds_it_afresh() -> None:
    state, now = a_working_set(), NOW.timestamp()
    first = state.snapshot(now)
    assert state.snapshot(now).layout is first.layout  # nothing touched: the layout stands
    state.apply(BookChanges(leases={"L0": replace(state.leases["L0"], state=LeaseState.ENDED, ended_at=NOW)}))
    after = state.snapshot(now)
    assert after.layout is first.layout and after.leases == () and after.nodes[0].free == frozenset(range(4))
    assert a_working_set().snapshot(now).running("L0") is not None
