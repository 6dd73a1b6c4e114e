"""The demo's dispatcher settings: the preemption grace shrinks with the agents' time scale."""

from __future__ import annotations

import pytest

from services.demo.system import demo_dispatcher_env, service_children
from services.dispatcher.config import DispatcherConfig


def test_the_grace_shrinks_by_the_time_scale_and_the_dispatcher_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    env = demo_dispatcher_env(1200.0)
    assert env == {"CARDFLOW_DISPATCHER_PREEMPT_AFTER_S": "0.5"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert DispatcherConfig().preempt_after_s == 0.5


def test_only_the_named_service_gets_the_extra_environment() -> None:
    children = {child.name: child for child in service_children(env={"dispatcher": {"X": "1"}})}
    assert children["dispatcher"].env == {"X": "1"}
    assert children["matcher"].env == {}
