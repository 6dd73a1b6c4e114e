"""Report validation (fencing) as a pure function: every way a report can be refused."""

from __future__ import annotations

import pytest

from shared.leasing.fencing import LeaseClaim, Rejection, check_claim
from shared.leasing.records import LeaseRecord, LeaseState
from tests.unit.dispatcher.builders import a_lease_record

LEASE = a_lease_record("L1", "T1", agent_id="a1", token=7)
ENDED = a_lease_record("L1", "T1", agent_id="a1", token=7, state=LeaseState.ENDED)
CLAIM = LeaseClaim(agent_id="a1", lease_id="L1", task_id="T1", fencing_token=7)


def test_the_holding_agent_with_the_current_token_is_accepted() -> None:
    assert check_claim(CLAIM, LEASE) is None


@pytest.mark.parametrize(
    ("claim", "lease", "reason"),
    [
        (CLAIM, None, Rejection.UNKNOWN_LEASE),
        (CLAIM, ENDED, Rejection.LEASE_ENDED),
        (LeaseClaim("a2", "L1", "T1", 7), LEASE, Rejection.WRONG_AGENT),
        (LeaseClaim("a1", "L1", "T1", 6), LEASE, Rejection.STALE_TOKEN),
        (LeaseClaim("a1", "L1", "T1", 8), LEASE, Rejection.STALE_TOKEN),
        (LeaseClaim("a1", "L1", "T2", 7), LEASE, Rejection.WRONG_TASK),
        # the agent is checked before the token, the token before the task and the lease's state
        (LeaseClaim("a2", "L1", "T2", 3), ENDED, Rejection.WRONG_AGENT),
        (LeaseClaim("a1", "L1", "T1", 3), ENDED, Rejection.STALE_TOKEN),
    ],
)
def test_every_other_report_is_refused_with_a_reason_and_a_sentence(
    claim: LeaseClaim, lease: LeaseRecord | None, reason: Rejection
) -> None:
    refusal = check_claim(claim, lease)
    assert refusal is not None and refusal.reason is reason
    assert "L1" in refusal.detail
