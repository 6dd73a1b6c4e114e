"""bench/scale.py's breakdown (the walk's split at the last grant, the contract's floor), its steady cycles, its
plans digest and its queue's checkpointing tasks, on a small case."""

from __future__ import annotations

import random
import re
import sys
from dataclasses import replace

import pytest

from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES
from tests.helpers.bench_scripts import load_bench_script

scale = load_bench_script("scale", "scale_bench")
scale_inputs = sys.modules["bench.scale_inputs"]


@pytest.mark.parametrize("kept", [False, True], ids=["list", "kept inputs"])
def test_the_phases_split_the_walk_at_the_last_grant_and_count_every_task(kept: bool) -> None:
    snapshot = scale.build_snapshot(40, random.Random("fleet"))
    queue = scale.build_queue(600, random.Random("queue"))
    planned_queue, planned_snapshot = scale.kept_inputs(snapshot, queue, POLICIES["cardflow"]) if kept else (queue, snapshot)
    phases = dict(scale.phase_times(planned_snapshot, planned_queue))
    # "3a. decide 12,022 tasks, up to the last grant", "3b. decide the other 87,978 (none starts)"
    counts = [int(re.findall(r"\d[\d,]*", label.split(". ", 1)[1])[0].replace(",", ""))
              for label in phases if label[:2] in ("3a", "3b")]
    assert sum(counts) == len(queue)
    granted = {grant.task_id for grant in plan(snapshot, queue, POLICIES["cardflow"], scale.NOW).grants}
    assert granted, "the case must grant something for the split to mean anything"
    ordered = scale.order_queue(queue, POLICIES["cardflow"], scale.NOW)
    last = max(index for index, task in enumerate(ordered) if task.task_id in granted)
    assert counts[0] == last + 1  # 3a ends with the last grant
    floor = scale.contract_floor(snapshot, queue)
    assert [label.split(" ")[0] for label, _ in floor] == ["order", "index", "read", "young-generation"]
    assert all(millis >= 0 for _, millis in floor)


def test_a_steady_cycle_starts_the_grants_ends_leases_and_adds_arrivals() -> None:
    snapshot = scale.build_snapshot(40, random.Random("fleet"))
    policy = POLICIES["cardflow"]
    kept = scale.OrderedQueue.of(scale.build_queue(600, random.Random("queue")), policy)
    decided = plan(snapshot, kept, policy, scale.NOW)
    following, updated, later, _ = scale.next_cycle(snapshot, kept, decided, scale.NOW, 0, random.Random("steady"))
    granted = {grant.task_id for grant in decided.grants}
    assert granted and later == scale.NOW + scale.CYCLE_S
    assert {task.task_id for task in updated} == ({task.task_id for task in kept} - granted) | {
        f"arrival-0-{index:06d}" for index in range(scale.CHURN)}
    assert scale.order_queue(updated, policy, later) == scale.order_queue(list(updated), policy, later)
    assert granted <= {lease.task_id for lease in following.leases}
    for node in following.nodes:  # every GPU is free or leased once
        leased = [gpu for lease in following.leases if lease.node_id == node.node_id for gpu in lease.gpu_indices]
        assert sorted(leased + sorted(node.free)) == list(range(node.gpus))


def test_the_plans_digest_is_reproducible_and_tells_policies_apart() -> None:
    snapshot = scale.build_snapshot(30, random.Random("fleet"))
    queue = scale.build_queue(300, random.Random("queue"))
    digest = scale.plans_digest(snapshot, queue, cycles=2)
    assert digest == scale.plans_digest(snapshot, queue, cycles=2)
    assert digest != scale.plans_digest(snapshot, queue, "easy-backfill", cycles=2)


def test_the_headline_record_keeps_the_first_plan_over_kept_inputs_as_ms_beside_the_list_and_the_build() -> None:
    steady = [scale.SteadyCycle(kept, 0.0, 3 * kept, 100, full) for kept, full in ((180.0, True), (90.0, False), (70.0, False))]
    record = scale.headline_record(scale.FirstPlans(kept_ms=240.0, list_ms=400.0, kept_build_ms=560.0, granted=10), steady)
    assert (record["ms"], record["list_ms"], record["kept_build_ms"]) == (240.0, 400.0, 560.0)
    assert (record["steady_max_ms"], record["steady_ms"], record["steady_cycles"]) == (180.0, 90.0, 3)
    assert (record["nodes"], record["queued"]) == scale.HEADLINE


def test_the_first_plans_time_kept_inputs_a_list_and_the_build_and_grant_alike() -> None:
    first = scale.time_plan(scale.Case(40, 600), repeats=1)
    snapshot, queue = scale.inputs_of(40, 600)
    assert first.granted == len(plan(snapshot, queue, POLICIES["cardflow"], scale.NOW).grants) > 0
    assert min(first.kept_ms, first.list_ms, first.kept_build_ms) > 0


def test_queued_tasks_checkpoint_from_an_rng_of_their_own_and_every_other_field_is_drawn_as_before() -> None:
    queue = scale.build_queue(2_000, random.Random("queue"))
    without = scale.build_queue(2_000, random.Random("queue"), checkpoint_share=0.0)
    assert all(task.checkpoint_interval_s is None for task in without)
    assert [replace(task, checkpoint_interval_s=None) for task in queue] == without
    intervals = [task.checkpoint_interval_s for task in queue if task.checkpoint_interval_s is not None]
    assert set(intervals) == {scale_inputs.CHECKPOINT_INTERVAL_S}
    assert abs(len(intervals) / len(queue) - scale_inputs.CHECKPOINT_SHARE) < 0.05
    assert scale.build_queue(500, random.Random("queue")) == queue[:500]  # a shorter queue is a prefix of a longer one


def test_a_started_grant_of_a_checkpointing_task_runs_as_a_lease_that_checkpoints_on_preemption() -> None:
    snapshot = scale.build_snapshot(40, random.Random("fleet"))
    policy = POLICIES["cardflow"]
    kept = scale.OrderedQueue.of(scale.build_queue(600, random.Random("queue")), policy)
    decided = plan(snapshot, kept, policy, scale.NOW)
    following, *_ = scale.next_cycle(snapshot, kept, decided, scale.NOW, 0, random.Random("steady"))
    checkpoints = {task.task_id: task.checkpoint_interval_s is not None for task in kept}
    started = [lease for lease in following.leases if lease.task_id in checkpoints]
    assert {lease.checkpoints_on_preempt for lease in started} == {True, False}
    assert all(lease.checkpoints_on_preempt == checkpoints[lease.task_id] for lease in started)


def test_each_variant_of_the_headline_changes_one_field_of_the_tasks_it_picks() -> None:
    """bench/scale_variants.py: a variant is the headline's queue with ONE field of some tasks changed (the headline
    itself none); every variant keeps the task ids, and each changes a task of the small queue."""
    from dataclasses import fields

    from bench.scale_variants import VARIANTS

    queue = scale.build_queue(600, random.Random("queue"))
    names = [field.name for field in fields(queue[0])]
    for variant in VARIANTS:
        changed_fields = set()
        for before, after in zip(queue, variant.queue(queue), strict=True):
            differ = {name for name in names if getattr(before, name) != getattr(after, name)}
            assert len(differ) <= 1 and "task_id" not in differ
            changed_fields |= differ
        assert len(changed_fields) == (0 if variant.name == "headline" else 1), variant.name
