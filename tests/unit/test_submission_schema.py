"""The published submission schema and the documented examples stay true to the code.

- docs/submission.schema.json equals `TaskSubmission.json_schema()` (regenerate with
  CARDFLOW_UPDATE_SNAPSHOTS=1 after an intended change);
- every ```json example in docs/submission.md is valid for the code AND the published schema,
  every ```json invalid example is invalid for both, and the error text shown after it is exact.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from shared.submission import SubmissionInvalid, TaskSubmission, load_submission_file, validate_submission

DOCS = Path(__file__).parents[2] / "docs"
SCHEMA_FILE = DOCS / "submission.schema.json"
GUIDE = DOCS / "submission.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def blocks(info: str) -> list[str]:
    """Bodies of the fenced blocks in the guide whose info string is exactly `info`."""
    return [body for found_info, body in FENCE.findall(GUIDE.read_text(encoding="utf-8")) if found_info == info]


def published_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def test_the_published_schema_matches_the_code() -> None:
    actual = render(TaskSubmission.json_schema())
    if os.environ.get("CARDFLOW_UPDATE_SNAPSHOTS") == "1":
        SCHEMA_FILE.write_text(actual, encoding="utf-8")
        return
    assert SCHEMA_FILE.exists(), f"{SCHEMA_FILE} is missing: regenerate it with CARDFLOW_UPDATE_SNAPSHOTS=1"
    if SCHEMA_FILE.read_text(encoding="utf-8") != actual:
        pytest.fail(
            f"{SCHEMA_FILE} differs from TaskSubmission.json_schema(). If the change is intended, regenerate it:\n"
            "  CARDFLOW_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/unit/test_submission_schema.py"
        )


def test_the_published_schema_is_a_valid_json_schema() -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == TaskSubmission.SCHEMA_ID and schema["additionalProperties"] is False


def test_the_guide_has_examples_of_each_kind() -> None:
    assert len(blocks("json")) >= 2 and blocks("json invalid") and blocks("yaml")


@pytest.mark.parametrize("example", blocks("json"), ids=lambda body: body.split("\n")[1].strip())
def test_valid_examples_pass_the_code_and_the_published_schema(example: str) -> None:
    validate_submission(example)
    published_validator().validate(json.loads(example))


def test_the_invalid_example_fails_both_with_the_documented_message() -> None:
    [example] = blocks("json invalid")
    errors = list(published_validator().iter_errors(json.loads(example)))
    assert errors, "the published schema accepts the documented invalid example"
    with pytest.raises(SubmissionInvalid) as caught:
        validate_submission(example)
    documented = [body for body in blocks("text") if body.startswith("invalid task submission")]
    assert documented == [str(caught.value) + "\n"]


def test_the_yaml_example_loads_into_valid_submissions(tmp_path: Path) -> None:
    [example] = blocks("yaml")
    path = tmp_path / "tasks.yaml"
    path.write_text(example, encoding="utf-8")
    tasks = [validate_submission(raw) for raw in load_submission_file(path)]
    assert [task.name for task in tasks] == ["tokenize shard 17", "finetune 7b"]
    assert tasks[0].inputs[0].version == "2024-06-01"
    for raw in load_submission_file(path):
        published_validator().validate(raw)


@pytest.mark.parametrize(
    "change",
    [
        {"gpus": 0},
        {"priority_class": "urgent"},
        {"inputs": ["http://x/y"]},
        {"template": "no-version"},
        {"env": {"1BAD": "x"}},
        {"gpu": 1},
    ],
    ids=lambda change: next(iter(change)),
)
def test_the_code_and_the_published_schema_reject_the_same_mistakes(change: dict[str, Any]) -> None:
    raw = json.loads(blocks("json")[0]) | change
    with pytest.raises(SubmissionInvalid):
        validate_submission(raw)
    assert list(published_validator().iter_errors(raw))
