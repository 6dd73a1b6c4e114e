"""The matching request built from a submission, and its JSON form for re-matching."""

from __future__ import annotations

from services.matcher.request import build_request, request_from_json, request_to_json
from shared.scheduling.model import Profile

from .builders import a_submission


def test_request_takes_gpus_vram_estimate_profile_and_card_filter() -> None:
    submission = a_submission(
        gpus=4, min_vram_gb=40, estimate_gpu_hours=12.5, profile="memory",
        card_types={"allow": ["H100", "A100-80G"], "deny": ["A10"]},
    )  # fmt: skip
    request = build_request(submission)

    assert (request.gpus, request.min_vram_gb, request.estimate_gpu_hours) == (4, 40.0, 12.5)
    assert request.profile is Profile.MEMORY
    assert request.allow == {"H100", "A100-80G"} and request.deny == {"A10"}


def test_no_vram_and_no_filter_mean_any_card() -> None:
    request = build_request(a_submission())
    assert request.min_vram_gb == 0.0 and request.allow == frozenset() and request.deny == frozenset()
    deny_only = build_request(a_submission(card_types={"deny": ["T4"]}))
    assert deny_only.allow == frozenset() and deny_only.deny == {"T4"}


def test_json_round_trip_keeps_the_request() -> None:
    request = build_request(a_submission(gpus=3, min_vram_gb=24, card_types={"allow": ["L40S", "A10"]}))
    as_json = request_to_json(request)
    assert as_json["allow"] == ["A10", "L40S"]
    assert request_from_json(as_json) == request
