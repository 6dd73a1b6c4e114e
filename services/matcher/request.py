"""The matching request of a task: built from its submission, stored as JSON, rebuilt for re-matching."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.cards import MatchRequest
from shared.scheduling.model import Profile
from shared.submission import TaskSubmission


def build_request(submission: TaskSubmission) -> MatchRequest:
    """GPUs, VRAM per GPU (none stated = any), estimate, profile and allow/deny of a submission."""
    card_types = submission.card_types
    return MatchRequest(
        gpus=submission.gpus,
        min_vram_gb=submission.min_vram_gb or 0.0,
        estimate_gpu_hours=submission.estimate_gpu_hours,
        profile=submission.profile,
        allow=frozenset(card_types.allow or ()) if card_types else frozenset(),
        deny=frozenset(card_types.deny) if card_types else frozenset(),
    )


def request_to_json(request: MatchRequest) -> dict[str, Any]:
    """A JSON object for `matcher.tasks.request` / `matcher.matches.request` (lists sorted)."""
    return {
        "gpus": request.gpus,
        "min_vram_gb": request.min_vram_gb,
        "estimate_gpu_hours": request.estimate_gpu_hours,
        "profile": request.profile.value,
        "allow": sorted(request.allow),
        "deny": sorted(request.deny),
    }


def request_from_json(data: Mapping[str, Any]) -> MatchRequest:
    """The inverse of `request_to_json`."""
    return MatchRequest(
        gpus=int(data["gpus"]),
        min_vram_gb=float(data["min_vram_gb"]),
        estimate_gpu_hours=float(data["estimate_gpu_hours"]),
        profile=Profile(data["profile"]),
        allow=frozenset(data.get("allow") or ()),
        deny=frozenset(data.get("deny") or ()),
    )
