"""The demo's policy as ordinary config changes (pure): applied by `cardflow up --demo`, undone after.

The demo's simulated agents run `time_scale` times faster than the wall clock the dispatcher plans
by, so the policy's wall-clock durations (`DEMO_SCALED`: the preemption grace, idle reclaim's
window and start-up grace) shrink by the same factor, or core work would wait ten real minutes for
a task that takes seconds and no idle lease would ever be reclaimed. The demo also shows
approvals: `DEMO_ADDED` puts its approval rule (`DEMO_APPROVAL_RULE`: core work above 20
GPU-hours) and its reviewer (`DEMO_REVIEWER` for project `llm`) beside the owner's own rules and
reviewers. That change is recorded like any other (actor `system:demo`, a reason saying what and why, a new version in the
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

from shared.config.governance import ApprovalRule
from shared.config.policy import PolicyDocument

DEMO_ACTOR = "system:demo"
DEMO_SCALED = ("preemption.after_s", "idle_reclaim.window_s", "idle_reclaim.grace_s")
"""Policy keys that are wall-clock durations the demo scales (document key paths)."""
DEMO_REVIEWER = "demo-reviewer"
"""The token name of the demo's reviewer (the demo runner creates it through the identity API)."""
DEMO_REVIEWED_PROJECT = "llm"
DEMO_APPROVAL_RULE: dict[str, Any] = {"name": "demo-big-core", "priority_class": "core", "gpu_hours_above": 20.0}
"""Core work estimated above 20 GPU-hours (on its chosen card) waits for a reviewer (in the demo: the llm team's big core runs)."""
DEMO_ADDED = ("approvals.rules", "reviewers.by_project")
"""Policy keys the demo adds to (the owner's rules and reviewers stay beside the demo's)."""
DEMO_KEYS = (*DEMO_SCALED, *DEMO_ADDED)
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
        for key in [key for key in version.values if key in in_force]:
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
    """The change that puts the demo's values in force (each owner's duration / `time_scale`, the
    demo's approval rule and reviewer added to the owner's), or None."""
    if not history:
        return None
    state, in_force = demo_state(history), history[-1].values
    scale = max(time_scale, 1.0)
    wanted = {key: _rounded(state.owner[key] / scale) for key in DEMO_SCALED if state.owner.get(key) is not None}
    wanted |= {key: demo_value(key, state.owner[key]) for key in DEMO_ADDED if key in state.owner}
    changed = {key: value for key, value in wanted.items() if in_force[key] != value}
    if not changed:
        return None
    scaled = ", ".join(f"{key} {_text(state.owner[key])} → {_text(value)}" for key, value in changed.items() if key in DEMO_SCALED)
    said = [f"the demo's agents run {scale:g}x faster than the clock, so the policy's waiting times shrink alike: {scaled}"]
    if changed.keys() & set(DEMO_ADDED):
        said = [*said[: bool(scaled)], f"core work above {DEMO_APPROVAL_RULE['gpu_hours_above']:g} GPU-hours waits for a "
                f"reviewer (rule {DEMO_APPROVAL_RULE['name']!r}, reviewer {DEMO_REVIEWER!r} for {DEMO_REVIEWED_PROJECT})"]
    return DemoChange(
        tuple(f"{key}={json.dumps(value)}" for key, value in changed.items()),
        f"{DEMO_CHANGE}: {'; '.join(said)} (undone at the next start without --demo)",
    )


def demo_value(key: str, owner: Any) -> Any:
    """The demo's value of a `DEMO_ADDED` key: the owner's value with the demo's rule / reviewer added."""
    if key == "approvals.rules":
        rules, mine = list(owner or []), ApprovalRule(**DEMO_APPROVAL_RULE).model_dump(mode="json")
        return rules if any(rule.get("name") == mine["name"] for rule in rules) else [*rules, mine]
    if key == "reviewers.by_project":
        reviewers = dict(owner or {})
        named = list(reviewers.get(DEMO_REVIEWED_PROJECT, []))
        return reviewers | {DEMO_REVIEWED_PROJECT: named if DEMO_REVIEWER in named else [*named, DEMO_REVIEWER]}
    raise KeyError(f"{key} is not a key the demo adds to")


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
