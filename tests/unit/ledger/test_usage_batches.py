"""A ledger batch's usage as one `usage.batch_recorded` per project charges exactly what one `usage.recorded` per
lease per step charged: the ledger's accounts and increments, the dispatcher's quota counts, audit replay's sums."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from services.ledger.accounting import LeaseAccount
from services.ledger.batch import BatchEffects, fold_batch
from shared.cards import load_catalog
from shared.events import Envelope, UsageBatchRecorded, UsageRecorded, make_event
from shared.events.carried import carried_usage, fold_order
from shared.events.emission import Emission
from shared.events.subjects import lease_subject
from shared.leasing.records import LeaseBook, QuotaRecord
from shared.leasing.task_facets import apply_events
from shared.leasing.work import LeaseRules
from shared.replay import replay

from .builders import T0, granted, released, renewed, submitted, succeeded

CATALOG = load_catalog()
S = timedelta(seconds=1)


def mixed_batch() -> list[Envelope]:
    """Two projects; a lease renewed twice and ended (carried by its success), one renewed, one ended, one only
    granted; a lease of a task the ledger sees submitted after its grant."""
    return [
        submitted("T1", project="proj-a"), submitted("T2", project="proj-a"), submitted("T3", project="proj-b"),
        granted("L1", "T1", gpus=2), granted("L2", "T2", gpus=1, card_type="A10"), granted("L3", "T3", gpus=4),
        granted("L5", "T5", gpus=1),
        renewed("L1", "T1", at=T0 + 40 * S), renewed("L3", "T3", at=T0 + 45 * S, util=30.0),
        renewed("L1", "T1", at=T0 + 70 * S, seq=3),
        released("L2", "T2", ended_at=T0 + 61 * S, gpus=1, card_type="A10"),
        succeeded("T1", "L1", 5, at=T0 + 95 * S, carrying=released("L1", "T1", ended_at=T0 + 95 * S, seq=4)),
        submitted("T5", project="proj-b"), renewed("L5", "T5", at=T0 + 30 * S),
    ]  # fmt: skip


def fold_one_by_one(events: Sequence[Envelope]) -> tuple[dict[str, LeaseAccount], list[BatchEffects]]:
    """Each event a batch of its own (what one `usage.recorded` per lease per step amounted to)."""
    leases: dict[str, LeaseAccount] = {}
    projects: dict[str, str] = {}
    steps = []
    for event in events:
        effects = fold_batch([event], CATALOG, leases, projects)
        leases.update(effects.leases)
        projects.update({task.task_id: task.project for task in effects.tasks.values()})
        steps.append(effects)
    return leases, steps


def published(emissions: Sequence[Emission], first_seq: int = 1) -> list[Envelope]:
    return [make_event(e.event_type, subject=e.subject, subject_seq=n, producer="ledger/t", actor="service:ledger",
                       data=e.data, occurred_at=T0 + 100 * S) for n, e in enumerate(emissions, first_seq)]  # fmt: skip


def on_their_own(carriers: Sequence[Envelope]) -> list[UsageRecorded]:
    """The usage.recorded events the carriers stand for, as events of their own (subject `lease/<id>`)."""
    pieces = [piece for carrier in carriers for piece in carried_usage(carrier)]
    seqs = Counter[str]()
    return [make_event(UsageRecorded, subject=lease_subject(piece.data.lease_id), producer="ledger/t",
                       subject_seq=seqs.update([piece.data.lease_id]) or seqs[piece.data.lease_id],
                       actor="service:ledger", data=piece.data.model_dump(), occurred_at=piece.occurred_at)
            for piece in pieces]  # fmt: skip


def test_one_event_per_project_charges_what_one_event_per_lease_and_step_charged() -> None:
    events = mixed_batch()
    batch = fold_batch(events, CATALOG, {}, {})
    leases, steps = fold_one_by_one(events)

    # the ledger: the same accounts; one increment per lease, each the sum of that lease's steps
    assert batch.leases == {lease_id: leases[lease_id] for lease_id in batch.leases}
    per_step = [increment for step in steps for increment, _ in step.increments]
    assert len(per_step) == 6 and len(batch.increments) == 4
    for increment, lease in batch.increments:
        own = [i for i in per_step if i.lease_id == lease.lease_id]
        assert (increment.from_at, increment.to_at) == (own[0].from_at, own[-1].to_at)
        assert increment.gpu_seconds == sum(i.gpu_seconds for i in own) == lease.gpu_seconds
        assert increment.cost == sum(i.cost for i in own) == lease.cost

    # the events: one per project, a slice per lease
    carriers = published(batch.emissions)
    assert [(e.type, e.subject, [s.lease_id for s in e.data.slices]) for e in carriers] == [
        ("usage.batch_recorded", "usage/proj-a", ["L1", "L2"]), ("usage.batch_recorded", "usage/proj-b", ["L3", "L5"])]
    singles = on_their_own(published([e for step in steps for e in step.emissions]))
    assert len(singles) == 6

    # the dispatcher's quota counts: windows that cut the intervals, one per card type
    window = (T0 + 20 * S, T0 + 65 * S)
    book = LeaseBook(accounts={
        "a": QuotaRecord("a", "proj-a", 10.0, None, *window), "a-h100": QuotaRecord("a-h100", "proj-a", 10.0, "H100", *window),
        "b": QuotaRecord("b", "proj-b", 10.0, None, T0, T0 + 40 * S, used_gpu_seconds=7.0),
    })  # fmt: skip
    counted_batch = apply_events(book, carriers, T0 + 100 * S, LeaseRules()).accounts
    counted_singles = apply_events(book, singles, T0 + 100 * S, LeaseRules()).accounts
    used = {account_id: account.used_gpu_seconds for account_id, account in counted_batch.items()}
    assert used == {account_id: account.used_gpu_seconds for account_id, account in counted_singles.items()}
    assert used == {"a": 2 * 45.0 + 1 * 41.0, "a-h100": 2 * 45.0, "b": 7.0 + 4 * 40.0 + 1 * 30.0}

    # audit replay: the same slices per lease and project, to the last digit
    replayed_batch, replayed_singles = replay([*events, *carriers]), replay([*events, *singles])
    assert replayed_batch.usage_by_lease() == {
        lease_id: replace(total, slices=1) for lease_id, total in replayed_singles.usage_by_lease().items()}
    for lease_id, total in replayed_batch.usage_by_lease().items():
        assert (total.gpu_seconds, total.cost) == (leases[lease_id].gpu_seconds, leases[lease_id].cost)
    assert {p: (t.gpu_seconds, t.cost) for p, t in replayed_batch.usage_by_project().items()} == {
        p: (t.gpu_seconds, t.cost) for p, t in replayed_singles.usage_by_project().items()}
    assert replayed_batch.tasks["T1"].used_cost == replayed_singles.tasks["T1"].used_cost > 0


def test_fold_order_tells_slices_then_the_event_then_its_carried_release() -> None:
    events = mixed_batch()
    carrier = published(fold_batch(events, CATALOG, {}, {}).emissions)[0]
    told = fold_order(carrier)
    assert [(e.type, e.data.lease_id) for e in told[:-1]] == [("usage.recorded", "L1"), ("usage.recorded", "L2")]
    assert told[-1] is carrier

    success = next(e for e in events if e.type == "task.succeeded")
    assert [e.type for e in fold_order(success)] == ["task.succeeded", "lease.released"]
    assert fold_order(success)[0] is success and fold_order(success)[1].data.lease_id == "L1"
    assert fold_order(events[0]) == (events[0],)
