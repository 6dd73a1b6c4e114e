"""EASY reservation + backfill, and the strict-order (head-of-line) alternative."""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R

from .builders import HOUR, IMMEDIATE_PREEMPTION, NOW, a_lease, a_node, a_task, deferrals, grants, nodes_of, reason_of, run

# Node b has 2 free GPUs; its other 6 are leased until NOW + 1h.
B_BUSY_1H = [a_node("b").free(2)]
B_LEASE = [a_lease("Lb").on("b").gpus(0, 1, 2, 3, 4, 5).ends(NOW + HOUR)]
HEAD = a_task("head").gpus(8).priority(9)


def plan_with(*tasks, nodes=B_BUSY_1H, leases=B_LEASE, **policy):
    policy.setdefault("headroom", 0.0)
    return run(nodes, [HEAD, *tasks], leases=leases, **policy)


def test_the_blocked_head_gets_a_reservation_when_its_gpus_free_up():
    result = plan_with()
    (reservation,) = result.reservations
    assert (reservation.task_id, reservation.card_type, reservation.start_at) == ("head", "H100", NOW + HOUR)
    assert reservation.node_ids == ("b",)
    assert reason_of(result, "head") == R.RESERVED
    assert "in about 1h00m" in deferrals(result)["head"].detail


def test_reservation_takes_the_earliest_node_to_free_up():
    nodes = [a_node("a").free(0), a_node("b").free(0)]
    leases = [a_lease("La").on("a").gpus(*range(8)).ends(NOW + 2 * HOUR),
              a_lease("Lb").on("b").gpus(*range(8)).ends(NOW + HOUR)]
    (reservation,) = plan_with(nodes=nodes, leases=leases).reservations
    assert (reservation.node_ids, reservation.start_at) == (("b",), NOW + HOUR)


def test_reservation_counts_leases_ending_on_one_node_only_when_together_they_fit():
    nodes = [a_node("a").free(4), a_node("b").free(4)]
    leases = [a_lease("La").on("a").gpus(0, 1, 2, 3).ends(NOW + HOUR),
              a_lease("Lb").on("b").gpus(0, 1, 2, 3).ends(NOW + 3 * HOUR)]
    (reservation,) = plan_with(nodes=nodes, leases=leases).reservations
    assert (reservation.node_ids, reservation.start_at) == (("a",), NOW + HOUR)


def test_backfill_that_ends_before_the_reservation_is_allowed():
    result = plan_with(a_task("short").gpus(2).runs(HOUR / 2))
    assert nodes_of(grants(result)["short"]) == ["b"]


def test_backfill_that_would_delay_the_reservation_is_refused():
    result = plan_with(a_task("long").gpus(2).runs(2 * HOUR))
    assert "long" not in grants(result)
    assert reason_of(result, "long") == R.BEHIND_RESERVATION
    assert deferrals(result)["long"].detail == (
        "would delay task head, which holds the reservation on H100 in 1h00m; this task runs about 2h00m"
    )


def test_long_backfill_may_use_gpus_the_reservation_does_not_need():
    nodes = [a_node("a").free(4), a_node("b").free(2)]
    leases = [*B_LEASE, a_lease("La").on("a").gpus(0, 1, 2, 3).ends(NOW + 5 * HOUR)]
    result = plan_with(a_task("long").gpus(2).runs(10 * HOUR), nodes=nodes, leases=leases)
    assert result.reservations[0].node_ids == ("b",)
    assert nodes_of(grants(result)["long"]) == ["a"]  # b fits best but is reserved


def test_long_backfill_on_another_card_type_is_not_held_back():
    nodes = [*B_BUSY_1H, a_node("x").card("A10").free(2)]
    result = plan_with(a_task("long").gpus(2).on("H100", "A10").runs(10 * HOUR), nodes=nodes)
    assert grants(result)["long"].card_type == "A10"


def test_grants_of_this_cycle_count_as_releases_for_the_reservation():
    nodes = [a_node("a").free(8)]
    first = a_task("first").gpus(8).priority(10).runs(2 * HOUR)
    result = run(nodes, [first, HEAD], headroom=0.0)
    assert "first" in grants(result)
    assert result.reservations[0].start_at == NOW + 2 * HOUR


def test_only_the_first_blocked_task_holds_a_reservation():
    result = plan_with(a_task("second").gpus(8).priority(5))
    assert [r.task_id for r in result.reservations] == ["head"]
    assert reason_of(result, "second") == R.NO_CAPACITY


def test_no_backfill_policy_keeps_everything_behind_the_reserved_head():
    result = plan_with(a_task("short").gpus(1).runs(60.0), backfill=False)
    assert result.reservations[0].task_id == "head"
    assert reason_of(result, "short") == R.BEHIND_RESERVATION


def test_head_of_line_blocking_stops_at_the_first_task_that_does_not_fit():
    tasks = [a_task("fits").gpus(1).runs(60.0), a_task("also-fits").gpus(1).priority(-1)]
    result = plan_with(*tasks, head_of_line_blocking=True, backfill=False)
    assert not result.grants and not result.reservations
    assert reason_of(result, "head") == R.NO_CAPACITY
    assert reason_of(result, "fits") == R.HEAD_OF_LINE
    assert deferrals(result)["fits"].detail == "waits behind task head, which cannot start yet (strict order, no backfill)"


def test_ineligible_tasks_do_not_block_the_line():
    result = run([a_node("a")], [a_task("waiting").not_ready().priority(9), a_task("ok")],
                 headroom=0.0, head_of_line_blocking=True)
    assert "ok" in grants(result)
    assert reason_of(result, "waiting") == R.DATA_NOT_READY


def test_a_task_that_can_never_fit_neither_blocks_the_line_nor_takes_the_reservation():
    huge = a_task("huge").gpus(64).priority(99)  # the fleet has 8 H100 GPUs in all
    strict = run(B_BUSY_1H, [huge, a_task("small")], leases=B_LEASE, headroom=0.0, head_of_line_blocking=True)
    assert "small" in grants(strict)
    assert deferrals(strict)["huge"].detail == "can never start: needs 64 GPUs, but at most H100 8 can ever be used by it"
    easy = plan_with(huge)
    assert [r.task_id for r in easy.reservations] == ["head"]


# -- A standard reservation needs its headroom covered at its start: free or borrowed GPUs ----------------

# 16 H100 GPUs, headroom 4 at 25%. Node a: 4 free, GPUs 0-3 leased for 5h; node b: 2 free, 6 leased for 1h.
# The standard head (8 GPUs) starts on b in 1h: then 12 GPUs are free, 8 for itself and 4 as headroom.
HEADROOM_NODES = [a_node("a").free(4), *B_BUSY_1H]


def lease_a_5h(*gpus: int):
    """A lease on node a's `gpus` (standard work unless made otherwise) that ends in 5h."""
    return a_lease("La").on("a").gpus(*gpus).ends(NOW + 5 * HOUR)


def plan_with_headroom(*tasks):
    return run(HEADROOM_NODES, [HEAD, *tasks], leases=[*B_LEASE, lease_a_5h(0, 1, 2, 3)], headroom=0.25, headroom_tracks_core=False)


@pytest.mark.parametrize(
    ("priority_class", "started"),
    [("opportunistic", True), ("standard", False)],
)
def test_long_opportunistic_backfill_may_borrow_the_headroom_the_reservation_needs(priority_class, started):
    long = getattr(a_task("long").gpus(2).runs(10 * HOUR), priority_class)()
    result = plan_with_headroom(long)
    assert result.reservations[0].start_at == NOW + HOUR
    assert ("long" in grants(result)) == started
    if started:
        assert nodes_of(grants(result)["long"]) == ["a"]
    else:  # it would hold 2 of the 4 headroom GPUs past the start, and cannot be preempted
        assert reason_of(result, "long") == R.BEHIND_RESERVATION


def test_long_opportunistic_backfill_never_takes_the_gpus_the_reserved_task_needs_itself():
    first = a_task("o1").opportunistic().gpus(4).runs(10 * HOUR).submitted(1)
    second = a_task("o2").opportunistic().gpus(2).runs(10 * HOUR).submitted(2)
    result = plan_with_headroom(first, second)
    assert set(grants(result)) == {"o1"}  # the 4 headroom GPUs on a; b's 2 free GPUs are the head's
    assert reason_of(result, "o2") == R.BEHIND_RESERVATION


@pytest.mark.parametrize(("opportunistic", "start_in"), [(True, HOUR), (False, 5 * HOUR)])
def test_a_standard_reservation_starts_once_free_and_borrowed_gpus_cover_the_headroom(opportunistic, start_in):
    nodes = [a_node("a").free(0), *B_BUSY_1H]  # at 1h: b's 8 GPUs free for the head, a still leased
    full_a = lease_a_5h(*range(8))
    full_a = full_a.opportunistic() if opportunistic else full_a
    result = run(nodes, [HEAD], leases=[*B_LEASE, full_a], headroom=0.25, headroom_tracks_core=False)
    assert result.reservations[0].start_at == NOW + start_in


def test_opportunistic_gpus_count_as_headroom_only_while_they_are_held():
    # 24 H100 GPUs, headroom 6. At 1h: 12 free (a 4, b 8), nothing borrowed any more: the opportunistic
    # lease on a ended after 30 min and its GPUs are among the free ones. 12 < 8 + 6 until a is free.
    nodes = [a_node("a").free(0), *B_BUSY_1H, a_node("c").free(0)]
    leases = [*B_LEASE, a_lease("Lo").on("a").gpus(0, 1, 2, 3).opportunistic().ends(NOW + HOUR / 2),
              lease_a_5h(4, 5, 6, 7), a_lease("Lc").on("c").gpus(*range(8)).ends(NOW + 10 * HOUR)]
    result = run(nodes, [HEAD], leases=leases, headroom=0.25, headroom_tracks_core=False)
    assert result.reservations[0].start_at == NOW + 5 * HOUR


def test_an_opportunistic_lease_preempted_in_the_same_cycle_does_not_cover_the_reservations_headroom():
    nodes = [a_node("a").free(0), *B_BUSY_1H]
    leases = [*B_LEASE, lease_a_5h(*range(8)).opportunistic()]
    core = a_task("c").core().gpus(8).runs(10 * HOUR)  # runs on a's 8 GPUs, La's, for 10h
    result = run(nodes, [core, HEAD], leases=leases, headroom=0.25, headroom_tracks_core=False, **IMMEDIATE_PREEMPTION)
    assert [p.lease_id for p in result.preemptions] == ["La"]
    # At 1h b's 8 GPUs are free, but nothing is borrowed any more: 8 < 8 + 4 headroom until c ends.
    assert result.reservations[0].start_at == NOW + 10 * HOUR  # not in 1h, as if La still covered it


def test_a_later_reservation_sees_the_victims_gpus_taken_by_the_preempting_task_until_it_ends():
    # a: one opportunistic lease on all 8 GPUs; core c needs 2 of them for 1h, so 6 come free now.
    nodes = [a_node("a").free(0)]
    leases = [a_lease("La").on("a").gpus(*range(8)).opportunistic().ends(NOW + 5 * HOUR)]
    tasks = [a_task("c").core().gpus(2).runs(HOUR), a_task("wide").core().gpus(8).submitted(NOW)]
    result = run(nodes, tasks, leases=leases, headroom=0.0, **IMMEDIATE_PREEMPTION)
    assert [p.for_task_id for p in result.preemptions] == ["c"]
    assert result.reservations[0].start_at == NOW + HOUR  # when c ends, not when La was expected to
