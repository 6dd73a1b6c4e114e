"""Folding lease, task and output events into the ledger's effects (pure)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from services.ledger.accounting import cost_of, gpu_seconds_between
from services.ledger.batch import (
    UNKNOWN_PROJECT,
    UnpricedCardError,
    fold_batch,
    is_repeatable,
    lease_ids_of,
    task_ids_of,
)
from shared.cards import load_catalog

from .builders import T0, checkpointed, failed, granted, matched, released, renewed, submitted, succeeded

CATALOG = load_catalog()
H100 = Decimal(str(CATALOG.card("H100").price_per_gpu_hour))


def test_grant_renew_release_charge_the_lease_from_grant_to_end() -> None:
    t1, t2 = T0 + timedelta(seconds=40), T0 + timedelta(seconds=75, microseconds=5)
    events = [submitted("T1"), granted("L1", "T1", gpus=2), renewed("L1", "T1", at=t1), released("L1", "T1", ended_at=t2)]
    effects = fold_batch(events, CATALOG, {}, {})

    lease = effects.leases["L1"]
    assert lease.project == "proj-a" and lease.price_per_gpu_hour == H100
    assert lease.gpu_seconds == gpu_seconds_between(2, T0, t2) and lease.cost == cost_of(lease.gpu_seconds, H100)
    assert (lease.closed_at, lease.close_reason) == (t2, "succeeded")
    (usage,) = effects.emissions  # one event for the batch's project, one slice for the lease
    assert usage.subject == "usage/proj-a" and usage.data.project == "proj-a"
    (piece,) = usage.data.slices  # the renewal's increment and the end's, joined
    assert (piece.lease_id, piece.from_at, piece.to_at) == ("L1", T0, t2)
    assert piece.gpu_seconds == float(lease.gpu_seconds) and piece.cost == float(lease.cost)
    assert [(inc.from_at, inc.to_at, inc.gpu_seconds) for inc, _ in effects.increments] == [(T0, t2, lease.gpu_seconds)]
    # the same lease over two batches: one slice in each, adding up to the same
    first = fold_batch(events[:3], CATALOG, {}, {})
    second = fold_batch(events[3:], CATALOG, first.leases, {})
    assert [s.gpu_seconds for e in (*first.emissions, *second.emissions) for s in e.data.slices] == [80.0, 70.00001]
    assert second.leases == effects.leases


def test_a_renewal_applied_late_accounts_only_up_to_when_its_heartbeat_reached_the_stream() -> None:
    # The dispatcher applied the run's last heartbeat 30 s after it reached cf:reports, after the run had
    # ended (at 50 s): charged until the end, exactly, not until the renewal was applied.
    heard, applied, end = (T0 + timedelta(seconds=s) for s in (45, 75, 50))
    events = [submitted("T1"), granted("L1", "T1", gpus=2), renewed("L1", "T1", at=applied, heard_at=heard),
              released("L1", "T1", ended_at=end)]
    lease = fold_batch(events, CATALOG, {}, {}).leases["L1"]
    assert lease.gpu_seconds == gpu_seconds_between(2, T0, end) and lease.closed_at == end


def test_utilisation_is_weighted_by_each_intervals_gpu_seconds_and_the_grant_carries_the_time_scale() -> None:
    # 2 GPUs: 100 s at 20 %, 300 s without a report, 100 s at 10 % (the release's, since the last renewal)
    at = [T0 + timedelta(seconds=s) for s in (100, 400, 500)]
    events = [granted("L1", "T1", gpus=2, time_scale=60.0), renewed("L1", "T1", at=at[0], util=20.0),
              renewed("L1", "T1", at=at[1]), released("L1", "T1", ended_at=at[2], util=10.0)]  # fmt: skip
    lease = fold_batch(events, CATALOG, {}, {"T1": "p"}).leases["L1"]
    assert (lease.util_gpu_seconds, lease.busy_gpu_seconds) == (Decimal(400), Decimal(40 + 20))
    assert lease.mean_util_pct == pytest.approx(15.0)  # a plain mean of the reports would be 15 too; the next one not
    assert lease.time_scale == 60.0 and lease.gpu_seconds == 1000  # billing stays wall-clock
    skewed = [granted("L2", "T2", gpus=1), renewed("L2", "T2", at=at[0], util=90.0), released("L2", "T2", ended_at=at[2],
              gpus=1, util=10.0)]  # fmt: skip
    assert fold_batch(skewed, CATALOG, {}, {"T2": "p"}).leases["L2"].mean_util_pct == pytest.approx((90 * 100 + 10 * 400) / 500)
    plain = fold_batch([granted("L3", "T3"), released("L3", "T3", ended_at=at[0])], CATALOG, {}, {"T3": "p"}).leases["L3"]
    assert (plain.mean_util_pct, plain.time_scale) == (None, 1.0)


def test_a_release_without_a_seen_grant_charges_from_granted_at() -> None:
    ended = T0 + timedelta(minutes=10)
    effects = fold_batch([released("L9", "T9", ended_at=ended, card_type="A10", gpus=1)], CATALOG, {}, {"T9": "proj-b"})
    lease = effects.leases["L9"]
    assert lease.opened_at == T0 and lease.gpu_seconds == 600 and lease.project == "proj-b"


def test_a_lease_of_an_unknown_task_is_fixed_when_the_submission_arrives() -> None:
    effects = fold_batch([granted("L1", "T1"), submitted("T1")], CATALOG, {}, {})
    assert effects.leases["L1"].project == "proj-a"
    alone = fold_batch([granted("L2", "T2")], CATALOG, {}, {})
    assert alone.leases["L2"].project == UNKNOWN_PROJECT


def test_events_after_the_end_change_nothing() -> None:
    ended = T0 + timedelta(seconds=60)
    first = fold_batch([granted("L1", "T1"), released("L1", "T1", ended_at=ended)], CATALOG, {}, {"T1": "p"})
    later = fold_batch(
        [renewed("L1", "T1", at=ended + timedelta(seconds=5)), released("L1", "T1", ended_at=ended + timedelta(seconds=9))],
        CATALOG, first.leases, {"T1": "p"},
    )  # fmt: skip
    assert later.emissions == [] and later.leases["L1"] == first.leases["L1"]


def test_output_per_run_keeps_the_highest_report() -> None:
    events = [
        checkpointed("T1", "L1", 100), checkpointed("T1", "L1", 250), checkpointed("T1", "L1", None),
        succeeded("T1", "L1", 240), checkpointed("T1", "L2", 30),
    ]  # fmt: skip
    outputs = fold_batch(events, CATALOG, {}, {}).output.rows
    assert outputs[("T1", "L1")].output_units == 250 and outputs[("T1", "L1")].final
    assert outputs[("T1", "L2")].output_units == 30 and not outputs[("T1", "L2")].final


def test_a_flagged_success_keeps_its_runs_output_apart() -> None:
    events = [
        checkpointed("T1", "L1", 40), succeeded("T1", "L1", None, flags=("implausibly_early_success",
                                                                         "output_out_of_bounds"), claimed=1e9),
        checkpointed("T2", "L2", 10), succeeded("T2", "L2", 12, flags=("implausibly_early_success",)),
        succeeded("T3", "L3", 7),
    ]  # fmt: skip
    effects = fold_batch(events, CATALOG, {}, {})
    assert set(effects.output.rows) == {("T3", "L3")}  # only the believed run counts
    one, two = effects.output.flagged[("T1", "L1")], effects.output.flagged[("T2", "L2")]
    assert (one.output_units, one.claimed_output_units, one.flags) == (
        Decimal(40), Decimal("1000000000.0"), ("implausibly_early_success", "output_out_of_bounds"))
    assert (two.output_units, two.claimed_output_units, two.flags) == (Decimal(12), None, ("implausibly_early_success",))


def test_a_card_without_a_price_is_an_error() -> None:
    with pytest.raises(UnpricedCardError, match="ZZ9"):
        fold_batch([granted("L1", "T1", card_type="ZZ9")], CATALOG, {}, {})


def test_which_events_skip_the_inbox_because_folding_them_again_is_harmless() -> None:
    ended = T0 + timedelta(seconds=60)
    repeatable = [submitted("T1"), granted("L1", "T1"), renewed("L1", "T1", at=ended), released("L1", "T1", ended_at=ended),
                  succeeded("T1", "L1", 7), succeeded("T1", "L1", None), matched("T1", "H100", seq=1)]  # fmt: skip
    recorded = [checkpointed("T1", "L1", 3), succeeded("T1", "L1", 7, flags=("implausibly_early_success",))]
    assert [is_repeatable(e) for e in repeatable] == [True] * len(repeatable)
    assert [is_repeatable(e) for e in recorded] == [False] * len(recorded)


def test_repeatable_events_folded_again_over_the_state_they_left_change_nothing() -> None:
    t1, t2, later = (T0 + timedelta(seconds=s) for s in (30, 95, 300))
    history = [submitted("T1"), granted("L1", "T1"), renewed("L1", "T1", at=t1, util=50.0),
               released("L1", "T1", ended_at=t2, util=20.0), succeeded("T1", "L1", 7)]  # fmt: skip
    first = fold_batch(history, CATALOG, {}, {})
    stored = first.leases
    for upto in range(1, len(history)):  # a redelivery of an early event, after some of the later ones
        partial = fold_batch(history[:upto], CATALOG, {}, {})
        again = fold_batch(history[upto - 1:upto], CATALOG, partial.leases, {"T1": "proj-a"})
        assert again.emissions == [] and again.increments == [] and again.opened == set(), history[upto - 1].type
        assert all(again.leases[lease_id] == lease for lease_id, lease in partial.leases.items() if lease_id in again.leases)
    redelivered = fold_batch([e for e in history if is_repeatable(e)], CATALOG, stored, {"T1": "proj-a"})
    assert redelivered.emissions == [] and redelivered.opened == set() and redelivered.leases == stored
    assert redelivered.output.rows == first.output.rows
    assert redelivered.tasks == first.tasks  # inserted ON CONFLICT DO NOTHING
    renewal_after_end = fold_batch([renewed("L1", "T1", at=later, util=90.0)], CATALOG, stored, {"T1": "proj-a"})
    assert renewal_after_end.emissions == [] and renewal_after_end.leases == stored


def test_only_leases_without_a_loaded_row_count_as_opened() -> None:
    opened = fold_batch([granted("L1", "T1"), released("L2", "T2", ended_at=T0 + timedelta(seconds=5))], CATALOG, {}, {})
    assert opened.opened == {"L1", "L2"}
    loaded = fold_batch([granted("L1", "T1"), renewed("L1", "T1", at=T0 + timedelta(seconds=5))], CATALOG, opened.leases, {})
    assert loaded.opened == set()


def test_of_two_matches_at_the_same_instant_the_matchers_later_one_is_kept_in_any_order() -> None:
    first, rematch = matched("T1", "H100", seq=1), matched("T1", "A100", seq=2)
    for events in ([first, rematch], [rematch, first]):
        kept = fold_batch(events, CATALOG, {}, {}).matches["T1"]
        assert (kept.chosen, kept.subject_seq, kept.order) == ("A100", 2, (T0, 2))


@pytest.mark.parametrize("carrier", [succeeded, failed])
def test_a_release_carried_by_the_run_end_is_charged_and_closed_like_its_own_event(carrier) -> None:
    # The dispatcher writes a one-lease run's end as ONE event: task.succeeded / task.failed carrying its release.
    t1, t2 = T0 + timedelta(seconds=30), T0 + timedelta(seconds=95)
    release = released("L1", "T1", ended_at=t2, util=20.0, last_checkpoint_at=t1)
    end = (lambda **kw: succeeded("T1", "L1", 7, at=t2, **kw)) if carrier is succeeded else (
        lambda **kw: failed("T1", "L1", at=t2, **kw))
    opening = [submitted("T1"), granted("L1", "T1"), renewed("L1", "T1", at=t1, util=50.0)]
    alone = fold_batch([*opening, release, end()], CATALOG, {}, {})
    carried = fold_batch([*opening, end(carrying=release)], CATALOG, {}, {})
    assert carried.leases == alone.leases and carried.leases["L1"].closed_at == t2
    assert [increment for increment, _ in carried.increments] == [increment for increment, _ in alone.increments]
    assert [e.data for e in carried.emissions] == [e.data for e in alone.emissions] and len(carried.emissions) == 1
    assert (lease_ids_of([end(carrying=release)]), task_ids_of([end(carrying=release)])) == ({"L1"}, {"T1"})
    assert lease_ids_of([end()]) == task_ids_of([end()]) == set()
    # a release seen without its grant (the grant's batch failed) opens the account from its own facts
    unseen = fold_batch([end(carrying=release)], CATALOG, {}, {"T1": "proj-a"})
    assert unseen.opened == {"L1"} and unseen.leases["L1"].closed_at == t2
    # repeatable: a second delivery over the closed account changes nothing
    again = fold_batch([end(carrying=release)], CATALOG, carried.leases, {"T1": "proj-a"})
    assert is_repeatable(end(carrying=release)) and again.emissions == [] and again.leases == carried.leases
