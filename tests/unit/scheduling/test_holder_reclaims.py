"""A standard reservation holder reclaims its fillers only if the headroom would then let it start
(`Policy.holder_reclaims_within_headroom`): preempting borrowed fillers leaves free + borrowed GPUs as they are,
so a holder the headroom refuses would preempt them, stay refused, and preempt them again once they refill.

Two 8-GPU nodes, headroom 4 of 16. Node a: a 4-GPU opportunistic filler that checkpoints (GPUs 0-3), a long
standard lease (4-5), 2 GPUs free. Node b: a 2-GPU standard lease past its estimate (the reservation's sweep
counts it as ending now) and a long standard lease. The 4-GPU standard holder's reservation is due now only if
the filler yields; with it gone, 2 + 4 free GPUs and nothing borrowed leave 2 < 4 beside the holder.
"""

from __future__ import annotations

import pytest

from shared.scheduling.model import DeferralReason as R

from .builders import HOUR, NOW, a_lease, a_node, a_task, grants, reason_of, run

FIXED = dict(headroom_tracks_core=False)


def _fleet():
    nodes = [a_node("a").free(2), a_node("b").free(0)]
    leases = [
        a_lease("Lo").on("a").gpus(0, 1, 2, 3).opportunistic().checkpoints_on_preempt().started(NOW - 120).ends(NOW + 9 * HOUR),
        a_lease("La").on("a").gpus(4, 5).ends(NOW + 9 * HOUR),
        a_lease("Lover").on("b").gpus(0, 1).ends(NOW - 60),
        a_lease("Lb").on("b").gpus(2, 3, 4, 5, 6, 7).ends(NOW + 9 * HOUR),
    ]
    return nodes, leases


@pytest.mark.parametrize(
    ("headroom", "policy", "preempted"),
    [
        (0.25, dict(holder_reclaims_within_headroom=False), ["Lo"]),  # off: it reclaims the filler in vain
        (0.25, {}, []),  # on (cardflow): it waits; the filler keeps running
        (0.0, {}, ["Lo"]),  # no headroom to refuse it: it reclaims
    ],
)
def test_a_standard_holder_reclaims_fillers_only_if_the_headroom_lets_it_start(headroom, policy, preempted):
    nodes, leases = _fleet()
    holder = a_task("h").gpus(4).runs(10 * HOUR).submitted(NOW - HOUR)
    result = run(nodes, [holder], leases=leases, headroom=headroom, **FIXED, **policy)
    assert [p.lease_id for p in result.preemptions] == preempted
    assert reason_of(result, "h") == (R.AWAITING_PREEMPTION if preempted else R.RESERVED)



def _slack_fleet(*running: tuple[str, tuple[int, ...]]):
    """Headroom 4 of 16. Node a: a long standard lease (4-5); node b: a long standard lease (0-5); every other GPU
    free unless `running` (node, GPUs) holds it."""
    busy = {"a": {4, 5}, "b": {0, 1, 2, 3, 4, 5}}
    for node_id, gpus in running:
        busy[node_id] |= set(gpus)
    nodes = [a_node(node_id).free_indices(*sorted(set(range(8)) - used)) for node_id, used in busy.items()]
    leases = [a_lease("La").on("a").gpus(4, 5).ends(NOW + 9 * HOUR),
              a_lease("Lb").on("b").gpus(0, 1, 2, 3, 4, 5).ends(NOW + 9 * HOUR)]
    return nodes, leases


@pytest.mark.parametrize(("keeps", "short_waits", "holder_starts_next"), [(False, False, False), (True, True, True)])
def test_a_reclaiming_holder_keeps_the_headroom_it_counted_on_for_the_rest_of_the_cycle(keeps, short_waits,
                                                                                          holder_starts_next):
    """A 4-GPU filler on node a (0-3) leaves 2 GPUs free on each node: the holder reclaims it (4 free + 4 borrowed
    − its 4 = the headroom). Off: a short standard task behind it takes a free GPU in the headroom (it returns
    within the grace), so the next plan — filler gone, the short task running — refuses the holder (7 free − 4 <
    4) and fillers would take its GPUs again. On: the short task waits, and the next plan starts the holder."""
    nodes, leases = _slack_fleet(("a", (0, 1, 2, 3)))
    filler = a_lease("Lo").on("a").gpus(0, 1, 2, 3).opportunistic().checkpoints_on_preempt().started(NOW - 120)
    holder = a_task("h").gpus(4).runs(10 * HOUR).submitted(NOW - HOUR)
    short = a_task("s").gpus(1).runs(300).submitted(NOW - 60)
    policy = dict(reclaiming_holder_keeps_headroom=keeps)
    first = run(nodes, [holder, short], leases=[*leases, filler.ends(NOW + 9 * HOUR)], headroom=0.25, **FIXED, **policy)
    assert [p.lease_id for p in first.preemptions] == ["Lo"]
    assert ("s" not in grants(first)) is short_waits
    if short_waits:
        assert reason_of(first, "s") == R.HEADROOM
    running = []
    if not short_waits:
        placement = grants(first)["s"].placements[0]
        running.append(a_lease("Ls").on(placement.node_id).gpus(*placement.gpu_indices).ends(NOW + 300))
    nodes, leases = _slack_fleet(*[(lease.build().node_id, lease.build().gpu_indices) for lease in running])
    second = run(nodes, [holder], leases=[*leases, *running], headroom=0.25, **FIXED, **policy)
    assert ("h" in grants(second)) is holder_starts_next
