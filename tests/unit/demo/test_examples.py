"""The sample submissions in examples/ say what their README says they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.cards import load_catalog
from shared.cards.matching import MatchRequest, rank_cards
from shared.submission import SubmissionInvalid, load_submission_file, validate_submission

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load(name: str) -> list[dict]:
    """As `cardflow submit` reads them."""
    return load_submission_file(EXAMPLES / name)


@pytest.mark.parametrize("name", ["minimal.json", "finetune.yaml", "mixed-batch.yaml", "waits-for-data.yaml", "impossible.yaml"])
def test_valid_examples_validate(name: str) -> None:
    for submission in load(name):
        validate_submission(submission)


def test_the_invalid_example_lists_every_problem() -> None:
    (submission,) = load("invalid.json")
    with pytest.raises(SubmissionInvalid) as caught:
        validate_submission(submission)
    assert {p.field for p in caught.value.problems} >= {"name", "project", "priority_class", "gpu", "gpus"}


def test_the_impossible_example_fits_no_card_of_the_catalog() -> None:
    (submission,) = load("impossible.yaml")
    request = MatchRequest(gpus=submission["gpus"], min_vram_gb=submission["min_vram_gb"],
                           estimate_gpu_hours=submission["estimate_gpu_hours"], profile=submission["profile"])  # fmt: skip
    assert rank_cards(request, load_catalog()).chosen is None


def test_every_example_is_listed_in_the_readme() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for path in EXAMPLES.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`" in readme
