"""Facets in any order lead to a grant; a grant is a lease row, `lease.granted` and an agent command."""

from __future__ import annotations

import pytest

from shared.settings import Settings
from tests.integration.dispatcher.harness import DispatcherHarness
from tests.unit.dispatcher.builders import matched, readiness, registered, submitted


@pytest.mark.parametrize("order", [("submitted", "ready", "matched"), ("matched", "ready", "submitted")])
async def test_facets_in_any_order_lead_to_a_grant_with_lease_event_and_command(
    fresh_settings: Settings, order: tuple[str, ...]
) -> None:
    facets = {"submitted": submitted("T1", gpus=2, checkpoint_minutes=10), "ready": readiness("T1"),
              "matched": matched("T1", [("H100", 900.0, 2.0)])}
    async with DispatcherHarness(fresh_settings) as h:
        h.start()
        await h.report(registered("a1", "n1", gpus=4))
        for name in order[:2]:
            await h.publish(facets[name])
        assert await h.wait_until(lambda: _has_task(h, "T1"))
        assert await h.leases("T1") == []  # incomplete facets: not in the queue
        await h.publish(facets[order[2]])

        granted = await h.wait_for_events("lease.granted")
        commands = await h.wait_for_commands("a1")

    assert len(granted) == 1 and len(commands) == 1
    grant, command = granted[0].data, commands[0]
    assert (grant.task_id, grant.node_id, grant.card_type, len(grant.gpu_indices)) == ("T1", "n1", "H100", 2)
    assert command.type == "command.lease_grant"
    order_ = command.data
    assert (order_.lease_id, order_.fencing_token, order_.gpu_indices) == (grant.lease_id, grant.fencing_token,
                                                                          grant.gpu_indices)
    assert order_.command == ("python", "train.py") and order_.env == {"SEED": "1"}
    assert order_.estimated_runtime_s == 900.0 and order_.checkpoint_interval_s == 600.0
    assert order_.resume_from is None and order_.ttl_s == 30.0


async def _has_task(h: DispatcherHarness, task_id: str) -> bool:
    return await h.task_state(task_id) is not None
