"""The end-to-end checks themselves: they find a double lease, and price leases like the ledger says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import count
from typing import Any

from shared.cards import load_catalog
from shared.events import Envelope, make_event
from shared.task_view import TaskView
from tests.helpers.system import double_leases, gpu_intervals, leased_money_by_project

T0 = datetime(2025, 6, 1, 12, tzinfo=UTC)
CATALOG = load_catalog()
_seq = count(1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(event_type: str, data: dict[str, Any], seconds: float) -> Envelope:
    return make_event(event_type, subject=f"lease/{data['lease_id']}", subject_seq=next(_seq), producer="t/1",
                      actor="t", data=data, occurred_at=at(seconds))  # fmt: skip


def grant(lease: str, gpus: tuple[int, ...], start: float, node: str = "n1") -> Envelope:
    return event("lease.granted", {"lease_id": lease, "task_id": f"T-{lease}", "agent_id": "a", "node_id": node,
                                   "card_type": "H100", "gpu_indices": list(gpus), "fencing_token": 1, "ttl_s": 30,
                                   "expires_at": at(start + 30).isoformat()}, start)  # fmt: skip


def release(lease: str, gpus: int, start: float, end: float, node: str = "n1") -> Envelope:
    return event("lease.released", {"lease_id": lease, "task_id": f"T-{lease}", "node_id": node, "card_type": "H100",
                                    "gpus": gpus, "granted_at": at(start).isoformat(), "ended_at": at(end).isoformat(),
                                    "reason": "succeeded"}, end)  # fmt: skip


def test_back_to_back_leases_of_a_gpu_are_fine() -> None:
    events = [grant("L1", (0, 1), 0), release("L1", 2, 0, 10), grant("L2", (1, 2), 10), release("L2", 2, 10, 20)]
    assert len(gpu_intervals(events)) == 4
    assert double_leases(events) == []


def test_an_overlap_on_one_gpu_is_found() -> None:
    events = [grant("L1", (0, 1), 0), grant("L2", (1, 2), 5), release("L1", 2, 0, 10), release("L2", 2, 5, 20)]
    (clash,) = double_leases(events)
    assert (clash[0].lease_id, clash[1].lease_id, clash[0].gpu_index) == ("L1", "L2", 1)


def test_a_lease_never_released_overlaps_every_later_one() -> None:
    events = [grant("L1", (3,), 0), grant("L2", (3,), 100), release("L2", 1, 100, 110)]
    assert len(double_leases(events)) == 1
    assert double_leases([grant("L1", (3,), 0, node="n1"), grant("L2", (3,), 1, node="n2")]) == []


def test_leased_money_is_duration_times_gpus_times_price_rounded_per_lease() -> None:
    events = [release("L1", 2, 0, 90), release("L2", 1, 0, 0.000001)]
    views = {"T-L1": TaskView(id="T-L1", project="p"), "T-L2": TaskView(id="T-L2", project="p")}
    price = Decimal(str(CATALOG.card("H100").price_per_gpu_hour))

    ((project, (gpu_seconds, cost)),) = leased_money_by_project(events, views, CATALOG, cost_quantum=Decimal("0.000001")).items()

    assert project == "p"
    assert gpu_seconds == Decimal("180.000001")
    assert cost == (Decimal(180) * price / 3600).quantize(Decimal("0.000001")) + Decimal(0)  # the 1 µs lease rounds to 0
