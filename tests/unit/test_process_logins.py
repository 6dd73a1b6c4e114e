"""shared.process_logins: every process's login is built from the rules the code already has."""

from __future__ import annotations

import pytest

from shared.pg_roles import SERVICE_ROLES
from shared.process_logins import Backend, DuplicateLoginError, password_variable, process_logins, stale_agent_users
from shared.redis_acl import UnsafeNameError, agent_user, system_users, upstream_user


def test_services_have_their_redis_user_and_role_agents_and_upstreams_redis_only() -> None:
    logins = {login.redis_user.name: login for login in process_logins(("gpu-1",), ("pipeline",))}

    assert {login.redis_user for login in logins.values() if login.pg_service} == set(system_users())
    assert {login.pg_service for login in logins.values() if login.pg_service} == set(SERVICE_ROLES)
    assert logins["agent.gpu-1"].redis_user == agent_user("gpu-1") and logins["agent.gpu-1"].pg_role is None
    assert logins["upstream.pipeline"].redis_user == upstream_user("pipeline")
    assert logins["service.ledger"].pg_role == "cardflow_ledger" and logins["gate"].pg_role == "cardflow_gate"


def test_password_variables_name_the_process_and_the_backend() -> None:
    logins = {login.redis_user.name: login for login in process_logins(("sim-h100-1",))}

    assert logins["service.intake"].password_variables == ("CARDFLOW_INTAKE_REDIS_PASSWORD", "CARDFLOW_INTAKE_POSTGRES_PASSWORD")
    assert logins["gate"].password_variables == ("CARDFLOW_GATE_REDIS_PASSWORD", "CARDFLOW_GATE_POSTGRES_PASSWORD")
    assert logins["agent.sim-h100-1"].password_variables == ("CARDFLOW_AGENT_SIM_H100_1_REDIS_PASSWORD",)
    assert password_variable("upstream.x.y", Backend.REDIS) == "CARDFLOW_UPSTREAM_X_Y_REDIS_PASSWORD"


def test_two_agents_that_would_share_a_variable_are_refused_and_a_repeated_one_counts_once() -> None:
    with pytest.raises(DuplicateLoginError, match="CARDFLOW_AGENT_A_1_REDIS_PASSWORD"):
        process_logins(("a-1", "a_1"))
    assert len(process_logins(("a-1", "a-1"))) == len(process_logins(("a-1",)))


def test_an_unsafe_agent_id_is_refused() -> None:
    with pytest.raises(UnsafeNameError):
        process_logins(("gpu-*",))


def test_stale_agent_users_are_the_agent_users_no_login_lists() -> None:
    logins = process_logins(("gpu-1",), ("pipeline-x",))
    existing = ["default", "gate", "service.intake", "agent.gpu-1", "agent.gpu-2", "agent.old.host", "upstream.pipeline-x",
                "upstream.gone", "agentsmith", "someone"]  # fmt: skip
    assert stale_agent_users(existing, logins) == ["agent.gpu-2", "agent.old.host"]
    assert stale_agent_users(existing, process_logins(("gpu-1", "gpu-2", "old.host"))) == []
