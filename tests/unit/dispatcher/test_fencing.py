"""Report validation (fencing) as a pure function: every way a report can be refused."""

from __future__ import annotations

import pytest

from shared.leasing.fencing import LeaseClaim, LeaseFacts, Rejection, check_claim, lease_facts

LEASE = LeaseFacts(agent_id="a1", task_id="T1", fencing_token=7, active=True)
CLAIM = LeaseClaim(agent_id="a1", lease_id="L1", task_id="T1", fencing_token=7)


def test_the_holding_agent_with_the_current_token_is_accepted() -> None:
    assert check_claim(CLAIM, LEASE) is None


@pytest.mark.parametrize(
    ("claim", "lease", "reason"),
    [
        (CLAIM, None, Rejection.UNKNOWN_LEASE),
        (CLAIM, LeaseFacts("a1", "T1", 7, active=False), Rejection.LEASE_ENDED),
        (LeaseClaim("a2", "L1", "T1", 7), LEASE, Rejection.WRONG_AGENT),
        (LeaseClaim("a1", "L1", "T1", 6), LEASE, Rejection.STALE_TOKEN),
        (LeaseClaim("a1", "L1", "T1", 8), LEASE, Rejection.STALE_TOKEN),
        (LeaseClaim("a1", "L1", "T2", 7), LEASE, Rejection.WRONG_TASK),
        # the agent is checked before the token, the token before the task and the lease's state
        (LeaseClaim("a2", "L1", "T2", 3), LeaseFacts("a1", "T1", 7, active=False), Rejection.WRONG_AGENT),
        (LeaseClaim("a1", "L1", "T1", 3), LeaseFacts("a1", "T1", 7, active=False), Rejection.STALE_TOKEN),
    ],
)
def test_every_other_report_is_refused_with_a_reason_and_a_sentence(
    claim: LeaseClaim, lease: LeaseFacts | None, reason: Rejection
) -> None:
    refusal = check_claim(claim, lease)
    assert refusal is not None and refusal.reason is reason
    assert "L1" in refusal.detail


def test_facts_come_from_a_lease_row() -> None:
    row = {"agent_id": "a1", "task_id": "T1", "fencing_token": 7, "state": "ended"}
    assert lease_facts(row) == LeaseFacts("a1", "T1", 7, active=False)
    assert lease_facts(None) is None
