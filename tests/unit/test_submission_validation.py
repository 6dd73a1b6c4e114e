"""Submission schema v1: valid submissions, every problem of a bad one at once, file loading."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from shared.scheduling.model import PriorityClass, Profile
from shared.submission import (
    DatasetRef,
    HeavyResource,
    Problem,
    SubmissionFileError,
    SubmissionInvalid,
    load_submission_file,
    parse_s3_uri,
    validate_submission,
)


def a_submission(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "resnet sweep 3", "project": "vision", "priority_class": "standard", "gpus": 4,
        "estimate_gpu_hours": 12.5, "profile": "compute",
    }
    return base | overrides


def problems_of(raw: Any) -> dict[str, Problem]:
    with pytest.raises(SubmissionInvalid) as caught:
        validate_submission(raw)
    return {problem.field: problem for problem in caught.value.problems}


def test_a_minimal_submission_gets_the_documented_defaults() -> None:
    task = validate_submission(a_submission())
    assert task.priority_class is PriorityClass.STANDARD and task.profile is Profile.COMPUTE
    assert (task.priority, task.inputs, task.env, task.labels) == (0, (), {}, {})
    assert task.heavy is None and task.command is None and not task.is_heavy


def test_a_full_submission_keeps_every_field() -> None:
    raw = a_submission(
        idempotency_key="sweep-3-run-1", priority=7, min_vram_gb=40, heavy=["memory", "bandwidth", "memory"],
        card_types={"allow": ["A100", "H100"], "deny": ["T4"]},
        inputs=["s3://datasets/imagenet/train/", "s3://datasets/labels.csv", {"dataset": "imagenet", "version": 3}],
        command=["python", "train.py", "--lr", "0.1"], env={"WANDB_MODE": "offline"}, image="ghcr.io/org/train:1",
        checkpoint={"interval_minutes": 30}, template="resnet@2", deadline="2025-07-01T18:00:00+02:00",
        output_unit="samples", labels={"team": "vision", "sweep/id": "3"},
    )
    task = validate_submission(raw)
    assert task.heavy == (HeavyResource.BANDWIDTH, HeavyResource.MEMORY)
    assert task.inputs[2] == DatasetRef(dataset="imagenet", version="3")
    assert task.deadline == datetime(2025, 7, 1, 16, 0, tzinfo=UTC) and task.deadline.utcoffset().total_seconds() == 0
    assert task.command == ("python", "train.py", "--lr", "0.1") and task.checkpoint.interval_minutes == 30
    assert task.card_types.allow == ("A100", "H100") and task.is_heavy


def test_json_text_and_bytes_are_accepted() -> None:
    text = json.dumps(a_submission(command="python train.py && echo done"))
    assert validate_submission(text) == validate_submission(text.encode())
    assert validate_submission(text).command == "python train.py && echo done"


def test_a_bad_submission_reports_every_problem_at_once() -> None:
    problems = problems_of(
        {
            "name": "", "project": "vision team", "priority_class": "urgent", "gpus": 0, "estimate_gpu_hours": -2,
            "profile": "fast", "heavy": ["memory", "disk"], "gpu": 4,
        }
    )
    assert set(problems) == {
        "name", "project", "priority_class", "gpus", "estimate_gpu_hours", "profile", "heavy[1]", "gpu",
    }
    assert problems["gpus"].value == 0 and problems["gpus"].expected == "a number of at least 1"
    assert problems["priority_class"].expected == "one of 'core', 'standard' or 'opportunistic'"
    assert problems["heavy[1]"].value == "disk"
    assert problems["estimate_gpu_hours"].expected == "a number greater than 0.0"
    assert problems["gpu"].expected == "no such field: remove it (did you mean 'gpus'?)"
    assert problems["name"].expected == "non-empty text"


def test_problems_inside_lists_and_objects_have_dotted_paths() -> None:
    problems = problems_of(
        a_submission(
            inputs=["s3://datasets/a", "https://example.com/a", {"dataset": "imagenet"}, 42, {"dataset": "x", "version": "1", "tag": "y"}],
            card_types={"allow": ["H100"], "deny": ["H100"]},
            checkpoint={"interval_minutes": 0}, command=[], env={"1BAD": "x", "OK": 3}, labels={"team": None},
        )
    )
    assert set(problems) == {
        "inputs[1]", "inputs[2].version", "inputs[3]", "inputs[4].tag", "card_types", "checkpoint.interval_minutes",
        "command", "env.1BAD", "env.OK", "labels.team",
    }
    assert problems["inputs[1]"].expected.startswith("an s3://bucket/key URI")
    assert problems["inputs[3]"].expected == "an s3://bucket/key URI or an object {dataset, version}"
    assert "both name H100" in problems["card_types"].expected
    assert problems["command"].expected == "at least 1 item(s)"
    assert problems["env.1BAD"].expected.startswith("an environment variable name")


def test_type_mismatches_and_time_zones() -> None:
    problems = problems_of(
        a_submission(gpus="four", priority=1.5, min_vram_gb=[], deadline="2025-07-01T18:00:00", command=7,
                     template="resnet", idempotency_key=5)
    )
    assert problems["gpus"].expected == "a whole number" and problems["gpus"].value == "four"
    assert problems["priority"].expected == "a whole number"
    assert problems["min_vram_gb"].expected == "a number"
    assert "with a time zone" in problems["deadline"].expected
    assert problems["command"].expected == "a list of arguments (argv) or one shell command line"
    assert problems["template"].expected.startswith("a template reference 'name@version'")
    assert problems["idempotency_key"].expected == "text"


def test_missing_required_fields_are_each_named() -> None:
    problems = problems_of({})
    assert set(problems) == {"name", "project", "priority_class", "gpus", "estimate_gpu_hours", "profile"}
    assert str(problems["gpus"]) == "gpus: missing; this field is required"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("{nope", "valid JSON"), (b"[1]", "a JSON object"), ("null", "a JSON object"), (b"\xff", "valid JSON")],
)
def test_bodies_that_are_not_objects(raw: Any, expected: str) -> None:
    [problem] = problems_of(raw).values()
    assert problem.field == "(whole input)" and problem.expected.startswith(expected)


def test_the_error_message_lists_every_problem_in_plain_english() -> None:
    with pytest.raises(SubmissionInvalid) as caught:
        validate_submission(a_submission(gpus=0, profile="fast"))
    assert str(caught.value) == (
        "invalid task submission, 2 problems:\n"
        "  - gpus: got 0; expected a number of at least 1\n"
        "  - profile: got \"fast\"; expected one of 'compute', 'memory' or 'balanced'"
    )


def test_s3_uris_split_into_bucket_key_and_prefix_marker() -> None:
    prefix = parse_s3_uri("s3://datasets/imagenet/train/")
    assert (prefix.bucket, prefix.key, prefix.is_prefix) == ("datasets", "imagenet/train/", True)
    assert prefix.ready_marker_key == "imagenet/train/_READY"
    single = parse_s3_uri("s3://datasets/labels.csv")
    assert not single.is_prefix and single.ready_marker_key is None
    with pytest.raises(ValueError, match="not an s3://bucket/key URI"):
        parse_s3_uri("s3://Bad_Bucket/key")


# ---- files --------------------------------------------------------------------------------


def test_a_json_file_with_one_object_gives_one_submission(tmp_path: Path) -> None:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(a_submission()))
    assert load_submission_file(path) == [a_submission()]


def test_a_yaml_file_with_a_list_gives_every_submission(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "- name: first\n  project: vision\n  priority_class: core\n  gpus: 1\n  estimate_gpu_hours: 1\n"
        "  profile: memory\n  deadline: 2025-07-01T18:00:00Z\n  inputs:\n    - dataset: imagenet\n"
        "      version: 2024-06-01\n"
        "- name: second\n  project: vision\n  priority_class: opportunistic\n  gpus: 8\n"
        "  estimate_gpu_hours: 100\n  profile: balanced\n"
    )
    first, second = [validate_submission(raw) for raw in load_submission_file(path)]
    assert first.inputs == (DatasetRef(dataset="imagenet", version="2024-06-01"),)  # a date stays text
    assert first.deadline == datetime(2025, 7, 1, 18, 0, tzinfo=UTC)
    assert second.gpus == 8


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.json", "{", "not valid JSON"),
        ("bad.yaml", "name: [unclosed", "not valid YAML"),
        ("list.yml", "- 1\n- name: x\n", "item 0 is int, expected an object"),
        ("scalar.yaml", "just text", "the document is str, expected an object"),
    ],
)
def test_unreadable_files_name_the_file_and_the_problem(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(SubmissionFileError, match=message) as caught:
        load_submission_file(path)
    assert str(path) in str(caught.value)
