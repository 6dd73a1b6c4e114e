"""The Redis ACL rules (shared.redis_acl) as data: names that cannot widen a key pattern, and each
user's keys. The server's own verdicts are in tests/reliability/test_trust_boundaries.py."""

from __future__ import annotations

import pytest

from shared.redis_acl import UnsafeNameError, agent_user, gate_user, password_sha256, service_user, trimmed_streams, upstream_user


@pytest.mark.parametrize("name", ["a*", "h100-?", "x[1]", "", "a b", "a:b", "-lead", "é"])
def test_a_name_that_could_widen_a_key_pattern_is_refused(name: str) -> None:
    with pytest.raises(UnsafeNameError, match="cannot be a Redis user"):
        agent_user(name)
    with pytest.raises(UnsafeNameError):
        upstream_user(name)


def test_an_agent_gets_its_own_inbox_only() -> None:
    rules = agent_user("h100-a").rules
    assert "(+xreadgroup +xack +xautoclaim +xclaim +xpending +xgroup|create +xinfo|groups ~cf:agent:h100-a)" in rules
    assert [rule for rule in rules if rule.startswith("~")] == ["~cf:reports", "~cf:deadletter"]
    assert not any("cf:events" in rule or "*" in rule for rule in rules)


def test_a_service_appends_only_its_own_event_stream_and_the_gate_alone_cf_events() -> None:
    appended = [rule for rule in service_user("dispatcher").rules if rule.startswith("~")]  # the keys of +xadd
    assert appended == ["~cf:events:dispatcher", "~cf:deadletter"]
    read = "+xreadgroup +xack +xautoclaim +xclaim +xpending +xgroup|create +xinfo|groups +xtrim +xrange +xlen"
    assert f"({read} ~cf:events ~cf:reports)" in service_user("dispatcher").rules  # cf:events is read, never appended
    assert "~cf:events" in gate_user().rules and "+xadd" in gate_user().rules
    assert "(+xadd +xtrim +xrange +xlen +xinfo|groups +xpending ~cf:agent:*)" in service_user("dispatcher").rules


def test_a_routed_group_reads_its_routed_stream_and_only_the_gate_appends_there() -> None:
    read = "+xreadgroup +xack +xautoclaim +xclaim +xpending +xgroup|create +xinfo|groups +xtrim +xrange +xlen"
    assert f"({read} ~cf:routed:matcher)" in service_user("matcher").rules  # read, never appended
    matcher = " ".join(service_user("matcher").rules)
    assert "cf:events " not in matcher + " " and "cf:events)" not in matcher  # it no longer reads cf:events
    assert "~cf:routed:*" in gate_user().rules and "+eval" in gate_user().rules  # FAN_OUT appends a routed event
    assert trimmed_streams("readiness") == ("cf:routed:readiness",)
    assert trimmed_streams("ledger") == ("cf:events", "cf:routed:alerts")


def test_file_lines_hold_only_a_hash_of_the_password() -> None:
    line = agent_user("h100-a").acl_file_line("secret-pw")
    assert "secret-pw" not in line and f"#{password_sha256('secret-pw')}" in line


def test_each_service_trims_the_streams_it_reads() -> None:
    assert trimmed_streams("intake") == ("cf:ingest", "cf:ingest:*")
    assert trimmed_streams("dispatcher") == ("cf:events", "cf:reports", "cf:agent:*")
    assert trimmed_streams("gate") == ("cf:events:*",)
    assert trimmed_streams("a-test-spec") == ("cf:*",)
