"""The demo's policy as ordinary config changes (pure): applied by `cardflow up --demo`, undone after.

The demo's simulated agents run `time_scale` times faster than the wall clock the dispatcher plans
by, so the policy's wall-clock durations (`DEMO_KEYS`: the preemption grace) shrink by the same
factor, or core work would wait ten real minutes for a task that takes seconds. That change is
recorded like any other (actor `system:demo`, a reason saying what and why, a new version in the
history), and taken back by the next start WITHOUT `--demo`, so a data dir once used for the demo
never silently keeps the demo's values:

    history = [PolicyVersion(v.version, is_demo_change(v.actor, v.reason), values_of(doc)) ...]
    demo_start(history, time_scale)   # -> assignments + reason, or None (already in force)
    demo_end(history)                 # -> assignments + reason, or None (nothing of the demo left)

Who owns a value is read from the history: a demo change of a key records the value it replaced
(the owner's); any other change of that key (an operator's `config set`, a rollback, the undo)
makes its value the owner's, and the demo's no longer in force. So an operator who changes the
grace during a demo keeps it, and the undo restores exactly what the demo replaced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.config.policy import PolicyDocument

DEMO_ACTOR = "system:demo"
DEMO_KEYS = ("preemption.after_s",)
"""Policy keys that are wall-clock durations the demo scales (document key paths)."""
DEMO_CHANGE = "cardflow up --demo"
"""How the reason of a demo change begins (with actor `DEMO_ACTOR`: nobody else can write that actor)."""
DEMO_UNDO = "a start without --demo"


@dataclass(frozen=True, slots=True)
class PolicyVersion:
    """One version of the policy as the demo rules see it: was it the demo's change, and its `DEMO_KEYS` values."""

    version: int
    demo_change: bool
    values: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DemoChange:
    """A change to write (`config set` assignments) and the reason to record with it."""

    assignments: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class DemoState:
    """Per key: the owner's value (what the demo replaced, or the value when the demo never touched
    it), and the demo's value where it is still in force."""

    owner: Mapping[str, Any]
    demo_in_force: Mapping[str, Any]


def is_demo_change(actor: str, reason: str) -> bool:
    """A version written by the demo's start (not by its undo, not by anyone else)."""
    return actor == DEMO_ACTOR and reason.startswith(DEMO_CHANGE)


def values_of(document: PolicyDocument) -> dict[str, Any]:
    """The document's `DEMO_KEYS` values."""
    dumped = document.model_dump(mode="json")
    values = {}
    for key in DEMO_KEYS:
        node: Any = dumped
        for part in key.split("."):
            node = node[part]
        values[key] = node
    return values


def demo_state(history: Sequence[PolicyVersion]) -> DemoState:
    """Fold the history, oldest first (see the module docstring)."""
    if not history:
        return DemoState({}, {})
    owner, demo = dict(history[0].values), {}
    in_force = dict(history[0].values)
    for version in history[1:]:
        for key in DEMO_KEYS:
            value = version.values[key]
            if value == in_force[key]:
                continue
            if version.demo_change:
                demo[key] = value
            else:
                owner[key], _ = value, demo.pop(key, None)
            in_force[key] = value
    return DemoState(owner, demo)


def demo_start(history: Sequence[PolicyVersion], time_scale: float) -> DemoChange | None:
    """The change that puts the demo's values in force (each owner's duration / `time_scale`), or None."""
    if not history:
        return None
    state, in_force = demo_state(history), history[-1].values
    scale = max(time_scale, 1.0)
    wanted = {key: _rounded(state.owner[key] / scale) for key in DEMO_KEYS if state.owner[key] is not None}
    changed = {key: value for key, value in wanted.items() if in_force[key] != value}
    if not changed:
        return None
    said = ", ".join(f"{key} {_text(state.owner[key])} → {_text(value)}" for key, value in changed.items())
    return DemoChange(
        tuple(f"{key}={json.dumps(value)}" for key, value in changed.items()),
        f"{DEMO_CHANGE}: the demo's agents run {scale:g}x faster than the clock, so the policy's waiting times "
        f"shrink alike: {said} (undone at the next start without --demo)",
    )


def demo_end(history: Sequence[PolicyVersion]) -> DemoChange | None:
    """The change that gives back the owner's values where the demo's are still in force, or None."""
    state = demo_state(history)
    if not state.demo_in_force:
        return None
    said = ", ".join(f"{key} {_text(value)} → {_text(state.owner[key])}" for key, value in state.demo_in_force.items())
    return DemoChange(
        tuple(f"{key}={json.dumps(state.owner[key])}" for key in state.demo_in_force),
        f"{DEMO_UNDO}: the demo's values are taken back: {said} (as before the demo)",
    )


def _rounded(value: float) -> float:
    return float(f"{value:.3g}")


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value)
