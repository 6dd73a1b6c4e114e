"""The dispatcher's policy: the configured preset with the knobs its configuration overrides."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.dispatcher.config import DispatcherConfig
from services.dispatcher.context import Dispatcher
from shared.scheduling.policies import POLICIES


def dispatcher(config: DispatcherConfig) -> Dispatcher:
    return Dispatcher(pool=None, schema="dispatcher", producer="dispatcher/test", actor="service:dispatcher",  # type: ignore[arg-type]
                      config=config, epoch=1)


def test_without_overrides_the_preset_is_used_as_is() -> None:
    assert dispatcher(DispatcherConfig()).policy == POLICIES["cardflow"]


def test_environment_overrides_the_preemption_and_filling_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARDFLOW_DISPATCHER_PREEMPT_AFTER_S", "30")
    monkeypatch.setenv("CARDFLOW_DISPATCHER_PREEMPT_MAX_LOST_GPU_HOURS", "1.5")
    monkeypatch.setenv("CARDFLOW_DISPATCHER_FILL_RESERVATIONS", "false")
    policy = dispatcher(DispatcherConfig()).policy
    assert (policy.preempt_after_s, policy.preempt_max_lost_gpu_hours, policy.fill_reservations) == (30.0, 1.5, False)
    assert policy.headroom == POLICIES["cardflow"].headroom  # everything else: the preset's


def test_the_dispatcher_plans_with_standard_fillers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its lease rows keep whether a lease borrowed the headroom (`leases.borrowed_headroom`), so the setting is
    no longer refused (tests/integration/dispatcher/test_dispatcher_fillers.py: the filler taken back after a
    restart)."""
    monkeypatch.setitem(POLICIES, "cardflow", replace(POLICIES["cardflow"], checkpointing_standard_borrows=True))
    assert dispatcher(DispatcherConfig()).policy.checkpointing_standard_borrows
