"""Consolidation (`Policy.holder_consolidates`, shared/scheduling/consolidation.py): the reservation's holder takes a
node whose every lease checkpoints and fits now on the other nodes' free GPUs — and nothing else."""

from __future__ import annotations

import pytest

from shared.scheduling.consolidation import fits_elsewhere
from shared.scheduling.model import DeferralReason as R

from .builders import HOUR, NOW, a_lease, a_node, a_task, deferrals, reason_of, run

ON = dict(holder_consolidates=True, headroom=0.0)


def _fleet(mover_checkpoints=True, mover_class="standard", b_free=2, c_ends_in=5 * HOUR, mover_gpus=2):
    """Node a: a lease of `mover_gpus` GPUs (standard, checkpointing) and the rest free; node b: core work on all but
    `b_free` GPUs for 9 h; node c: core work on all 8 GPUs until `c_ends_in` — the 8-GPU holder's reservation."""
    mover = a_lease("m").on("a").gpus(*range(mover_gpus)).started(NOW - HOUR).ends(NOW + 10 * HOUR)
    mover = mover.checkpoints_on_preempt() if mover_checkpoints else mover
    if mover_class != "standard":  # builders change in place
        mover = mover.opportunistic() if mover_class == "opportunistic" else mover.core()
    nodes = [a_node("a").free_indices(*range(mover_gpus, 8)), a_node("b").free_indices(*range(8 - b_free, 8)),
             a_node("c").free_indices()]
    leases = [mover, a_lease("Lb").on("b").gpus(*range(8 - b_free)).core().ends(NOW + 9 * HOUR),
              a_lease("Lc").on("c").gpus(*range(8)).core().ends(NOW + c_ends_in)]
    return nodes, leases


def wide(submitted_ago: float = HOUR, core: bool = False):
    """The 8-GPU holder (a new builder each time: builders change in place)."""
    task = a_task("w").gpus(8).submitted(NOW - submitted_ago)
    return task.core() if core else task.standard()


@pytest.mark.parametrize(
    ("policy", "fleet", "task", "moved"),
    [
        (ON, {}, wide(), True),  # 6 GPUs free on a, the 2-GPU lease fits on b's 2: a is the holder's now, not in 5 h
        (dict(ON, holder_consolidates=False), {}, wide(), False),  # off (every preset)
        # opportunistic work filling the drain: reclaimed by the holder anyway (fill_reservations); without it, moved
        (dict(ON, fill_reservations=False), dict(mover_class="opportunistic"), wide(), True),
        (ON, dict(mover_class="core"), wide(), False),  # core work is never moved
        (ON, dict(mover_checkpoints=False), wide(), False),  # it would lose its progress
        (ON, dict(b_free=1), wide(), False),  # it would not restart at once
        (ON, dict(c_ends_in=HOUR / 2), wide(), False),  # the reservation starts within consolidate_after_s
        (dict(ON, consolidate_after_s=HOUR / 4), dict(c_ends_in=HOUR / 2), wide(), True),
        (ON, {}, wide(60), False),  # inside the holder's grace
        (ON, {}, wide(core=True), True),  # a core holder too (no opportunistic victim, no filler to preempt)
        (dict(ON, headroom=0.1), {}, wide(), False),  # 8 free of 24, the holder would leave fewer than 2 for the headroom
        (dict(ON, headroom=0.1), {}, wide(core=True), False),  # ... and so would the moved standard task at its restart
        (dict(ON, preemption=False), {}, wide(), False),
    ],
)
def test_the_holder_takes_a_node_whose_work_checkpoints_and_fits_elsewhere_now(policy, fleet, task, moved):
    nodes, leases = _fleet(**fleet)
    result = run(nodes, [task], leases=leases, **policy)
    assert [(p.lease_id, p.for_task_id) for p in result.preemptions] == ([("m", "w")] if moved else [])
    if moved:
        assert reason_of(result, "w") == R.AWAITING_PREEMPTION and not result.reservations
        assert deferrals(result)["w"].detail.startswith("moving 1 lease that checkpoint")
    elif not result.preemptions:
        assert reason_of(result, "w") == R.RESERVED


def test_the_node_moving_the_fewest_gpus_is_chosen():
    """Nodes a and d both become whole by moving their leases; d's single GPU moves, a's two stay."""
    nodes, leases = _fleet(b_free=3)
    nodes.append(a_node("d").free_indices(*range(1, 8)))
    leases.append(a_lease("m1").on("d").gpus(0).checkpoints_on_preempt().started(NOW - HOUR).ends(NOW + 10 * HOUR))
    result = run(nodes, [wide()], leases=leases, **ON)
    assert [p.lease_id for p in result.preemptions] == ["m1"]


@pytest.mark.parametrize(
    ("widths", "free", "fits"),
    [((2,), (2,), True), ((2,), (1, 1), False), ((2, 1), (3,), True), ((2, 2), (3, 1), False),
     ((1, 2), (2, 1), True), ((), (), True), ((4, 2, 2), (4, 2, 2), True), ((3, 3), (4, 2), False)],
)
def test_fits_elsewhere_places_widest_first_best_fit(widths, free, fits):
    assert fits_elsewhere(widths, free) is fits
