"""200 mixed tasks through the whole system: every one ends, no GPU is leased twice, the ledger adds up."""

from __future__ import annotations

import random
from datetime import datetime
from decimal import Decimal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from services.ledger.reports import Grouping, ledger_rows
from shared.cards import load_catalog
from shared.events import TaskState
from tests.helpers.system import RunningSystem, double_leases, leased_money_by_project

CATALOG = load_catalog()
FAIL_HALFWAY = {"CARDFLOW_SIM_FAIL_AT": "0.5", "CARDFLOW_SIM_EXIT_CODE": "3"}
PROJECTS = ("llm", "vision", "speech", "research")


def mixed_submissions(count: int, seed: int = 11) -> list[dict[str, Any]]:
    """Every class, four projects, 1-8 GPUs, small (L40S) and 80 GB (H100 only) jobs; some fail halfway."""
    rng = random.Random(seed)
    submissions = []
    for n in range(count):
        gpus = rng.choice((1, 1, 1, 2, 2, 4, 8))
        big = rng.random() < 0.3
        submission = {
            "name": f"mixed-{n:03d}",
            "project": rng.choice(PROJECTS),
            "priority_class": rng.choice(("core", "standard", "standard", "opportunistic")),
            "priority": rng.randint(0, 10),
            "gpus": gpus,
            "min_vram_gb": 80 if big else rng.choice((16, 24, 40)),
            "estimate_gpu_hours": round(gpus * rng.uniform(0.5, 1.5), 2),
            "profile": rng.choice(("compute", "memory", "balanced")),
            "checkpoint": {"interval_minutes": 10},
            "output_unit": "samples",
        }
        if n % 40 == 7:
            submission["env"] = FAIL_HALFWAY
        submissions.append(submission)
    return submissions


async def test_two_hundred_mixed_tasks_end_and_the_ledger_charges_exactly_the_leased_time(system: RunningSystem) -> None:
    for agent_id, sim in (("h100-a", "H100x8"), ("h100-b", "H100x8"), ("l40s-a", "L40Sx8")):
        system.start_agent(agent_id, sim, time_scale=4000)
    submissions = mixed_submissions(200)
    await system.submit(submissions)

    await system.wait_for(
        lambda s: len(s.views) == 200 and all(v.is_terminal for v in s.views.values()),
        timeout=150, what="200 terminal tasks",
    )  # fmt: skip
    released = await system.wait_for(_all_leases_released, timeout=30, what="every lease released")
    ledger = await system.wait_for(ledger_closed(released), timeout=30, what="the ledger to close every lease")

    views = system.views
    should_fail = {s["name"] for s in submissions if "env" in s}
    assert {v.name for v in views.values() if v.state is TaskState.FAILED} == should_fail
    assert all(v.state is TaskState.SUCCEEDED for v in views.values() if v.name not in should_fail)
    assert double_leases(system.events) == []
    expected = leased_money_by_project(system.events, views, CATALOG, cost_quantum=Decimal("0.000001"))
    assert set(ledger) == set(expected)
    for project, (gpu_seconds, cost) in expected.items():
        assert ledger[project]["gpu_hours"] * 3600 == pytest.approx(float(gpu_seconds), rel=1e-9), project
        assert ledger[project]["cost"] == pytest.approx(float(cost), abs=1e-9), project
    assert await _dispatcher_lease_rows(system) == _released_leases(system)
    assert sum(row["tasks"] for row in ledger.values()) == len({e.data.task_id for e in system.of_type("lease.granted")})


def _all_leases_released(system: RunningSystem) -> set[str] | None:
    granted = {e.data.lease_id for e in system.of_type("lease.granted")}
    released = [e.data.lease_id for e in system.of_type("lease.released")]
    assert len(released) == len(set(released)), "a lease was released twice"
    return granted if granted and granted == set(released) else None


def ledger_closed(leases: set[str]) -> Callable[[RunningSystem], Awaitable[dict[str, dict[str, Any]] | None]]:
    """A check: the ledger closed every one of `leases`; then its totals per project."""

    async def check(system: RunningSystem) -> dict[str, dict[str, Any]] | None:
        closed = await system.pool.fetchval(
            "SELECT count(*) FROM ledger.lease_usage WHERE closed_at IS NOT NULL AND lease_id = ANY($1)", list(leases)
        )
        if closed < len(leases):
            return None
        return {row["project"]: row for row in await ledger_rows(system.pool, Grouping.PROJECT)}

    return check


async def _dispatcher_lease_rows(system: RunningSystem) -> dict[str, tuple[int, datetime, datetime]]:
    rows = await system.pool.fetch("SELECT lease_id, cardinality(gpu_indices) AS gpus, granted_at, ended_at FROM dispatcher.leases")
    return {row["lease_id"]: (row["gpus"], row["granted_at"], row["ended_at"]) for row in rows}


def _released_leases(system: RunningSystem) -> dict[str, tuple[int, datetime, datetime]]:
    return {e.data.lease_id: (e.data.gpus, e.data.granted_at, e.data.ended_at) for e in system.of_type("lease.released")}
