"""Replay (pure): leases, exact usage, quota use cut at the window like the ledger; and compare
names the event where the archive and a live model part ways."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from services.audit.compare import Model, compare_models, first_breaking
from services.audit.live import LiveIncrement, LiveLease, LiveLeaseUsage, LiveState
from services.ledger.quotas import QuotaStatus
from shared.events.carried import with_carried_usage
from shared.projection import task_id_of
from shared.replay import replay
from tests.unit.audit.builders import T0, carrier, granted, quota, released, renewed, submitted, usage
from tests.unit.ledger.builders import succeeded

H = timedelta(hours=1)


def history():
    return [
        submitted("T1"),
        granted("L1", "T1", gpus=2, at=T0),
        renewed("L1", "T1", at=T0 + H),
        usage("L1", "T1", start=T0, end=T0 + H, project="unknown"),  # booked before the ledger saw the task
        released("L1", "T1", ended_at=T0 + 2 * H, gpus=2),
        usage("L1", "T1", start=T0 + H, end=T0 + 2 * H, seq=2),
        quota("acct", "proj-a", 10, start=T0 + 90 * timedelta(minutes=1)),
    ]


def test_replay_rebuilds_leases_usage_and_quota_use() -> None:
    state = replay(history())
    lease = state.leases["L1"]
    assert (lease.gpus, lease.granted_at, lease.ended_at, lease.end_reason) == (2, T0, T0 + 2 * H, "succeeded")
    assert lease.renewals == 1 and not lease.is_active
    assert state.usage_by_lease()["L1"].gpu_seconds == Decimal(4 * 3600)
    assert state.usage_by_project() == {"proj-a": state.usage_by_lease()["L1"]}  # 'unknown' resolved
    # the window opens at T0+1.5h: half of the second hour on 2 GPUs = 1 GPU-hour
    assert state.quota_used_gpu_hours(state.quotas["acct"]) == Decimal(1)
    assert state.tasks["T1"].project == "proj-a" and state.events == len(history())


def test_a_release_seen_before_its_grant_still_makes_a_whole_lease() -> None:
    events = history()
    state = replay([events[4], events[1]])
    lease = state.leases["L1"]
    assert (lease.node_id, lease.fencing_token, lease.ended_at) == ("n1", 1, T0 + 2 * H)


def test_a_release_carried_by_the_run_end_ends_the_lease_as_its_own_event_would() -> None:
    events = history()
    release = events[4]
    carried = [*events[:4], succeeded("T1", "L1", 3.0, at=T0 + 2 * H, carrying=release), *events[5:]]
    alone, folded = replay(events).leases["L1"], replay(carried).leases["L1"]
    assert (folded.ended_at, folded.end_reason, folded.gpus) == (alone.ended_at, alone.end_reason, alone.gpus)
    assert folded.released_event == carried[4].event_id and replay(carried).tasks["T1"].state.value == "succeeded"
    assert compare_models(replay(carried), live_matching(carried), {"T1": carried}) == []


def live_matching(events) -> LiveState:
    state = replay(events)
    view = state.tasks["T1"].model_dump(mode="json")
    return LiveState(
        tasks={"T1": view},
        task_history={"T1": {e.event_id: "queued" for e in events}},
        leases={"L1": LiveLease("L1", "T1", "n1", "H100", (0, 1), 1, T0, T0 + 2 * H, "succeeded")},
        lease_usage={"L1": LiveLeaseUsage("L1", "T1", "proj-a", "H100", Decimal(14400), Decimal("40"), T0 + 2 * H, "succeeded")},
        increments={(p.event_id, "L1"): LiveIncrement(p.event_id, "L1", p.gpu_seconds, p.cost) for p in state.usage},
        quotas={"acct": QuotaStatus("acct", "proj-a", None, Decimal(10), T0 + 90 * timedelta(minutes=1),
                                    T0 + 90 * timedelta(minutes=1) + timedelta(days=30), 15.0, (0.8,), Decimal(1))},
    )  # fmt: skip


def test_equal_models_have_no_mismatch() -> None:
    events = history()
    assert compare_models(replay(events), live_matching(events), {"T1": events}) == []


def test_each_kind_of_difference_names_its_model_and_event() -> None:
    events = history()
    live = live_matching(events)
    live.leases["L1"] = LiveLease("L1", "T1", "n1", "H100", (0, 1), 1, T0, T0 + 3 * H, "expired")  # end differs
    first_usage = events[3].event_id
    live.increments[first_usage, "L1"] = LiveIncrement(first_usage, "L1", Decimal(7200), Decimal("0.5"))  # cost differs
    live.tasks["T1"] = {**live.tasks["T1"], "state": "failed"}
    found = compare_models(replay(events), live, {"T1": events})
    by_model = {m.model: m for m in found}
    assert by_model[Model.LEASES].event_id == events[4].event_id and "expired" in by_model[Model.LEASES].detail
    assert by_model[Model.LEDGER].event_id == first_usage
    assert by_model[Model.TASKS].event_id == events[0].event_id  # the views recorded another state after it
    seq_of = {e.event_id: n for n, e in enumerate(events, 1)}
    assert first_breaking(found, seq_of).model is Model.TASKS


def test_a_filler_lease_the_archive_does_not_call_one_is_a_lease_mismatch_at_its_grant() -> None:
    events = history()
    live = live_matching(events)
    live.leases["L1"] = replace(live.leases["L1"], borrowed_headroom=True)
    (found,) = compare_models(replay(events), live, {"T1": events})
    assert (found.model, found.event_id) == (Model.LEASES, events[1].event_id) and "borrowed_headroom" in found.detail
    told = [*events[:1], granted("L1", "T1", gpus=2, at=T0, borrowed_headroom=True), *events[2:]]
    assert replay(told).leases["L1"].borrowed_headroom
    assert compare_models(replay(told), live, {"T1": told}) == []


def test_what_one_side_lacks_is_named() -> None:
    events = history()
    live = live_matching(events)
    del live.increments[events[5].event_id, "L1"]
    live.increments["01XFORGEDXXXXXXXXXXXXXXXXX", "L1"] = LiveIncrement("01XFORGEDXXXXXXXXXXXXXXXXX", "L1", Decimal(1), Decimal(1))
    found = {m.event_id: m.detail for m in compare_models(replay(events), live, {"T1": events})}
    assert "no such increment" in found[events[5].event_id]
    assert "not archived" in found["01XFORGEDXXXXXXXXXXXXXXXXX"]


def test_a_batchs_usage_carried_by_one_event_replays_and_verifies_per_lease() -> None:
    # the second hour of L1 and an hour of L2 (task T2), one ledger batch: one event, a slice per lease
    events = history()
    two = [submitted("T2"), granted("L2", "T2", gpus=1, at=T0 + H), released("L2", "T2", ended_at=T0 + 2 * H, gpus=1)]
    sliced = carrier(events[5], usage("L2", "T2", start=T0 + H, end=T0 + 2 * H, gpus=1), seq=1)
    batched = [*events[:5], *two, sliced, events[6]]
    state = replay(batched)
    assert [(p.event_id, p.lease_id) for p in state.usage[1:]] == [(sliced.event_id, "L1"), (sliced.event_id, "L2")]
    assert state.usage_by_lease()["L1"] == replay(events).usage_by_lease()["L1"]
    assert state.usage_by_lease()["L2"].gpu_seconds == Decimal(3600)
    assert state.quota_used_gpu_hours(state.quotas["acct"]) == Decimal("1.5")  # L2's half hour in the window too
    assert state.tasks["T1"].used_gpu_hours == replay(events).tasks["T1"].used_gpu_hours
    assert state.tasks["T2"].used_gpu_hours == 1.0

    live = live_matching(batched)
    live.increments = {(p.event_id, p.lease_id): LiveIncrement(p.event_id, p.lease_id, p.gpu_seconds, p.cost)
                       for p in state.usage}  # fmt: skip
    live.lease_usage["L2"] = LiveLeaseUsage("L2", "T2", "proj-a", "H100", Decimal(3600), state.usage[2].cost,
                                            T0 + 2 * H, "succeeded")  # fmt: skip
    live.leases["L2"] = LiveLease("L2", "T2", "n1", "H100", (0,), 1, T0 + H, T0 + 2 * H, "succeeded")
    live.tasks["T2"] = state.tasks["T2"].model_dump(mode="json")
    live.quotas["acct"] = replace(live.quotas["acct"], used_gpu_hours=Decimal("1.5"))
    history_by_task: dict[str, list] = {}
    for told in with_carried_usage(batched):
        if (task_id := task_id_of(told)) is not None:
            history_by_task.setdefault(task_id, []).append(told)
    assert compare_models(state, live, history_by_task) == []
    del live.increments[sliced.event_id, "L2"]  # the ledger lost one slice of the event: that slice is named
    (missing,) = compare_models(state, live, history_by_task)
    assert (missing.key, missing.event_id) == ("L2", sliced.event_id) and "no such increment" in missing.detail
