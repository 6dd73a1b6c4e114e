"""Validate raw submissions and read submission files (JSON or YAML).

`validate_submission` reports ALL problems of a submission at once, each naming the field, the
value received and what is expected, so an upstream system can fix everything in one round trip.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from shared.submission.model import TaskSubmission
from shared.submission.problems import Problem, describe, problems_from


class SubmissionInvalid(ValueError):
    """A submission that cannot become a task; `.problems` lists everything wrong with it."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"invalid task submission, {count}:\n{describe(problems)}")


class SubmissionFileError(ValueError):
    """A submission file that cannot be read as JSON or YAML objects."""


def validate_submission(raw: dict[str, Any] | str | bytes) -> TaskSubmission:
    """A validated `TaskSubmission` from a dict or JSON text; raises `SubmissionInvalid`."""
    body = _json_object(raw)
    try:
        return TaskSubmission.model_validate(body)
    except ValidationError as error:
        raise SubmissionInvalid(problems_from(error, known_fields=submission_field_names())) from None


def _json_object(raw: dict[str, Any] | str | bytes) -> dict[str, Any]:
    if isinstance(raw, (str, bytes, bytearray)):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            excerpt = bytes(raw[:80]).decode(errors="replace") if not isinstance(raw, str) else raw[:80]
            raise SubmissionInvalid(
                [Problem(field="(whole input)", value=excerpt, expected=f"valid JSON ({error})")]
            ) from None
    if not isinstance(raw, dict):
        value = raw if isinstance(raw, (list, int, float, bool)) or raw is None else str(raw)
        raise SubmissionInvalid([Problem(field="(whole input)", value=value, expected="a JSON object")])
    return raw


@cache
def submission_field_names() -> frozenset[str]:
    """Every field name used anywhere in a submission (for "did you mean" hints)."""
    names: set[str] = set()
    pending: list[type[BaseModel]] = [TaskSubmission]
    while pending:
        model = pending.pop()
        names.update(model.model_fields)
        for field in model.model_fields.values():
            pending.extend(_models_in(field.annotation))
    return frozenset(names)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


class _PlainLoader(yaml.SafeLoader):
    """YAML without implicit timestamps: dates stay text, so YAML means what the same JSON means."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_submission_file(path: str | Path) -> list[dict[str, Any]]:
    """The raw submissions in a `.json`, `.yaml` or `.yml` file (one object or a list of objects)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".json":
            content = json.loads(text)
        else:
            content = yaml.load(text, Loader=_PlainLoader)  # noqa: S506 - a SafeLoader subclass
    except (ValueError, yaml.YAMLError) as error:
        raise SubmissionFileError(f"{path}: not valid {_format_name(path)}: {error}") from None
    items = content if isinstance(content, list) else [content]
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            where = f"item {index}" if isinstance(content, list) else "the document"
            raise SubmissionFileError(f"{path}: {where} is {type(item).__name__}, expected an object")
    return items


def _format_name(path: Path) -> str:
    return "JSON" if path.suffix.lower() == ".json" else "YAML"
