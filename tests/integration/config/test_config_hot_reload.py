"""Hot reload against real Redis, PostgreSQL and S3: a running dispatcher plans with a new policy
version and a running matcher ranks with a new catalog version, without a restart; grants and
matches record the versions they used."""

from __future__ import annotations

from typing import Any

import pytest

from services.config.service import SPEC as CONFIG
from services.config.store import ConfigStore
from services.dispatcher.config import DispatcherConfig
from services.matcher.service import build_spec as matcher_spec
from shared.config import CARDS, POLICY
from shared.settings import Settings
from shared.storage import open_object_store
from tests.integration.dispatcher.harness import FAST, DispatcherHarness
from tests.unit.dispatcher.builders import matched, readiness, registered, submitted
from tests.unit.matcher.builders import registered as node_registered
from tests.unit.matcher.builders import submitted as task_submitted

pytestmark = pytest.mark.integration

# Capacity reasons are stored at once, so the test can see WHY the task waits.
REASONS_AT_ONCE = DispatcherConfig(**(FAST.model_dump() | {"capacity_reason_every_s": 0.0}))


async def seeded(h: DispatcherHarness, name: str) -> bool:
    return bool(await h.fetch("SELECT 1 FROM config.versions WHERE name = $1", name))


def a_task(task_id: str, priority_class: str, gpus: int) -> list[Any]:
    """Submitted, ready and matched to H100 (a 15-minute run)."""
    return [submitted(task_id, priority_class=priority_class, gpus=gpus), readiness(task_id),
            matched(task_id, [("H100", 900.0, 2.0)])]


async def kept_waiting(h: DispatcherHarness, task_id: str) -> bool:
    """The dispatcher planned the task and deferred it: the headroom (or the reservation it gets
    because of the headroom: it is the first task that cannot start) keeps it waiting."""
    rows = await h.fetch("SELECT deferral_reason FROM dispatcher.tasks WHERE task_id = $1", task_id)
    return bool(rows) and rows[0]["deferral_reason"] in {"headroom", "reserved"}


async def test_a_lower_headroom_reaches_a_running_dispatcher_and_starts_the_held_task(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings, CONFIG) as h:
        assert await h.wait_until(lambda: seeded(h, "policy"))
        async with open_object_store(fresh_settings) as objects:
            store = ConfigStore(h.pool, objects, "config/test")  # type: ignore[arg-type]
            await store.set(POLICY, ["headroom.default=0.5"], base=1, actor="user:ops", reason="keep half for core work")
            h.start(config=REASONS_AT_ONCE)
            await h.report(registered("a1", "n1", gpus=4))
            await h.publish(*a_task("C0", "core", gpus=1))  # core work on H100: the headroom applies there
            await h.publish(*a_task("T0", "standard", gpus=2))
            assert [g.data.policy_version for g in await h.wait_for_events("lease.granted", 2)] == [2, 2]
            await h.publish(*a_task("T1", "standard", gpus=1))
            assert await h.wait_until(lambda: kept_waiting(h, "T1"))  # the last free GPU is the headroom
            assert await h.leases("T1") == []

            await store.set(POLICY, ["headroom.default=0"], base=2, actor="user:ops", reason="launch is over")
            granted = await h.wait_for_events("lease.granted", 3)
            (lease,) = await h.leases("T1")

    assert granted[2].data.task_id == "T1" and granted[2].data.policy_version == 3
    assert lease["policy_version"] == 3


async def test_a_new_catalog_reaches_a_running_matcher_and_open_tasks_are_ranked_again(fresh_settings: Settings) -> None:
    async with DispatcherHarness(fresh_settings, CONFIG, matcher_spec()) as h:
        assert await h.wait_until(lambda: seeded(h, "cards"))
        await h.publish(node_registered("n1", "H100"), node_registered("n2", "L40S"), task_submitted("T-small", gpus=1, min_vram_gb=20))
        (first,) = await h.wait_for_events("task.matched", 1)
        async with open_object_store(fresh_settings) as objects:
            store = ConfigStore(h.pool, objects, "config/test")  # type: ignore[arg-type]
            await store.set(CARDS, ["cards.L40S.price_per_gpu_hour=50"], base=1, actor="user:finance",
                            reason="our L40S contract price")
            second = (await h.wait_for_events("task.matched", 2))[1]
        matches = await h.fetch("SELECT trigger, chosen, catalog_version FROM matcher.matches ORDER BY created_at")

    assert (first.data.chosen, first.data.catalog_version) == ("L40S", "1")
    assert (second.data.chosen, second.data.catalog_version) == ("H100", "2")
    assert second.data.reason.startswith("re-matched: card catalog version 2 in force; ")
    assert [tuple(m) for m in matches] == [("submitted", "L40S", "1"), ("catalog_changed", "H100", "2")]

