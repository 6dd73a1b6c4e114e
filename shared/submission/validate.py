"""Validate raw submissions and read submission files (JSON or YAML).

`validate_submission` reports ALL problems of a submission at once, each naming the field, the
value received and what is expected, so an upstream system can fix everything in one round trip.
Hostile input is one more problem, never an exception: text over `MAX_SUBMISSION_BYTES`, JSON
nested deeper than Python's reader can follow, and what `raw_problems` finds (deep nesting, NUL,
unpaired surrogates, NaN / Infinity) are reported like any other.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from shared.submission.limits import DEFAULT_LIMITS, MAX_SUBMISSION_BYTES, SubmissionLimits
from shared.submission.model import LIMITS_CONTEXT, TaskSubmission
from shared.submission.problems import Problem, describe, problems_from
from shared.submission.raw import raw_problems
from shared.submission.storable import storable_text

WHOLE_INPUT = "(whole input)"


class SubmissionInvalid(ValueError):
    """A submission that cannot become a task; `.problems` lists everything wrong with it."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"invalid task submission, {count}:\n{describe(problems)}")


class SubmissionFileError(ValueError):
    """A submission file that cannot be read as JSON or YAML objects."""


def validate_submission(
    raw: dict[str, Any] | str | bytes, limits: SubmissionLimits | None = DEFAULT_LIMITS
) -> TaskSubmission:
    """A validated `TaskSubmission` from a dict or JSON text, within `limits` (None: the model's
    fixed bounds only, as when an event is parsed); raises `SubmissionInvalid`."""
    body = read_json_object(raw)
    found = raw_problems(body)
    try:
        submission = TaskSubmission.model_validate(body, context={LIMITS_CONTEXT: limits})
    except ValidationError as error:
        fields = {problem.field for problem in found}
        found += [p for p in problems_from(error, known_fields=submission_field_names()) if p.field not in fields]
    if found:
        raise SubmissionInvalid(found)
    return submission


def read_json_object(raw: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """The submission as an object (JSON text decoded within the size limit); `SubmissionInvalid` otherwise."""
    if isinstance(raw, (str, bytes, bytearray)):
        raw = _decoded_json(raw)
    if not isinstance(raw, dict):
        value = raw if isinstance(raw, (list, int, float, bool)) or raw is None else str(raw)
        raise SubmissionInvalid([Problem(field=WHOLE_INPUT, value=value, expected="a JSON object")])
    return raw


def _decoded_json(text: str | bytes | bytearray) -> Any:
    if len(text) > MAX_SUBMISSION_BYTES:
        raise SubmissionInvalid(
            [Problem(field=WHOLE_INPUT, value=f"{len(text)} bytes", expected=f"at most {MAX_SUBMISSION_BYTES} bytes of JSON")]
        )
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        reason = "nested too deeply to read" if isinstance(error, RecursionError) else str(error)
        excerpt = bytes(text[:80]).decode(errors="replace") if not isinstance(text, str) else storable_text(text[:80])
        raise SubmissionInvalid([Problem(field=WHOLE_INPUT, value=excerpt, expected=f"valid JSON ({reason})")]) from None


@cache
def submission_field_names() -> frozenset[str]:
    """Every field name used anywhere in a submission (for "did you mean" hints)."""
    return field_names_of(TaskSubmission)


def field_names_of(root: type[BaseModel]) -> frozenset[str]:
    """Every field name used anywhere in `root` and the models it nests (for "did you mean" hints)."""
    names: set[str] = set()
    pending: list[type[BaseModel]] = [root]
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


class PlainYamlLoader(yaml.SafeLoader):
    """YAML without implicit timestamps: dates stay text, so YAML means what the same JSON means."""


PlainYamlLoader.yaml_implicit_resolvers = {
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
            content = yaml.load(text, Loader=PlainYamlLoader)  # noqa: S506 - a SafeLoader subclass
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
