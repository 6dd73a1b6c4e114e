"""`bench/pipeline.py --deliveries`: per-task counts from two snapshots (pure part)."""

from __future__ import annotations

from collections import Counter

from bench.pipeline_deliveries import DeliverySnapshot, counts_per_task, delivery_counts_json


def test_counts_are_the_growth_per_task_and_what_did_not_grow_is_left_out() -> None:
    before = DeliverySnapshot({("cf:events", "audit"): 100, ("cf:events", "alerts"): 7},
                              {("ledger", "inbox"): 40, ("views", "inbox"): 3}, "1-0", {"cf:events": 50})  # fmt: skip
    after = DeliverySnapshot({("cf:events", "audit"): 120, ("cf:events", "alerts"): 7, ("cf:agent:*", "agent"): 2},
                             {("ledger", "inbox"): 50, ("views", "inbox"): 3}, "9-0",
                             {"cf:events": 60, "cf:routed:alerts": 1, "cf:reports": 0})  # fmt: skip
    counts = counts_per_task(before, after, Counter({"task.submitted": 2, "lease.granted": 3}), tasks=2)
    assert counts.deliveries == {("cf:events", "audit"): 10.0, ("cf:agent:*", "agent"): 1.0}
    assert counts.rows == {("ledger", "inbox"): 5.0}
    assert counts.events == {"task.submitted": 1.0, "lease.granted": 1.5}
    assert counts.appends == {"cf:events": 5.0, "cf:routed:alerts": 0.5}
    assert delivery_counts_json(counts)["deliveries_per_task"] == {"cf:events audit": 10.0, "cf:agent:* agent": 1.0}
