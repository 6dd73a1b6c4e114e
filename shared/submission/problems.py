"""Validation problems in plain English: which field, what value, what was expected.

`problems_from(error)` turns a pydantic `ValidationError` into `Problem`s with dotted paths such
as `inputs[2].version`. It is shared by submission validation and event parsing, so every
"this input is wrong" message in cardflow has the same shape.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence

from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError, field_validator
from pydantic_core import ErrorDetails, to_jsonable_python

from shared.submission.storable import storable, storable_text

MISSING_EXPECTED = "a value: this field is required"
_DATETIME = "an ISO 8601 date-time with a time zone, e.g. 2025-06-30T18:00:00Z"
MAX_VALUE_CHARS = 200
MAX_VALUE_ITEMS = 10
MAX_FIELD_CHARS = 300


class Problem(BaseModel):
    """One thing wrong with an input: the field (dotted path), the value received, what is expected.

    The value is kept as a storable excerpt (`shared.submission.storable`): at most
    `MAX_VALUE_CHARS` per text, `MAX_VALUE_ITEMS` items per list or object, 4 levels deep, with
    NUL, unpaired surrogates, NaN and Infinity written as text — so every problem can be stored
    in PostgreSQL and sent as JSON, whatever the input was.
    """

    model_config = ConfigDict(frozen=True)

    field: str
    value: JsonValue = None
    expected: str

    @field_validator("field", mode="before")
    @classmethod
    def _storable_field(cls, text: Any) -> Any:
        return storable_text(text, MAX_FIELD_CHARS) if isinstance(text, str) else text

    @field_validator("expected", mode="before")
    @classmethod
    def _storable_expected(cls, text: Any) -> Any:
        return storable_text(text) if isinstance(text, str) else text

    @field_validator("value", mode="before")
    @classmethod
    def _storable_value(cls, value: Any) -> Any:
        return storable(value, max_depth=4, max_chars=MAX_VALUE_CHARS, max_items=MAX_VALUE_ITEMS)

    def __str__(self) -> str:
        if self.expected == MISSING_EXPECTED:
            return f"{self.field}: missing; this field is required"
        shown = json.dumps(self.value, ensure_ascii=False, default=str)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{self.field}: got {shown}; expected {self.expected}"


def describe(problems: Sequence[Problem]) -> str:
    """All problems as one bulleted text block, one line per problem."""
    return "\n".join(f"  - {problem}" for problem in problems)


def field_path(loc: Iterable[int | str]) -> str:
    """`('inputs', 2, '<dataset>', 'version')` -> `inputs[2].version`; union tags `<...>` are dropped.

    Mapping keys appear as `.key` (`env.HOME`); an invalid key is reported at that same path.
    """
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]" or (part.startswith("<") and part.endswith(">")):
            continue  # a mapping key's own error, or a union tag: the path already names it
        else:
            path += f".{part}" if path else part
    return path or "(whole input)"


def problems_from(error: ValidationError, *, known_fields: Iterable[str] = ()) -> list[Problem]:
    """Every error of `error` as a Problem; errors at the same path merge into one ("a or b")."""
    by_path: dict[str, Problem] = {}
    fields = sorted(set(known_fields))
    for detail in error.errors(include_url=False):
        problem = _problem(detail, fields)
        earlier = by_path.get(problem.field)
        if earlier is None:
            by_path[problem.field] = problem
        elif problem.expected not in earlier.expected:
            merged = f"{earlier.expected} or {problem.expected}"
            by_path[problem.field] = earlier.model_copy(update={"expected": merged})
    return list(by_path.values())


def _problem(detail: ErrorDetails, known_fields: Sequence[str]) -> Problem:
    path = field_path(detail["loc"])
    if detail["type"] == "missing":
        return Problem(field=path, value=None, expected=MISSING_EXPECTED)
    excerpt = storable(detail["input"], max_depth=4, max_chars=MAX_VALUE_CHARS, max_items=MAX_VALUE_ITEMS)
    value = to_jsonable_python(excerpt, fallback=repr)
    return Problem(field=path, value=value, expected=_expected(detail, known_fields))


def _expected(detail: ErrorDetails, known_fields: Sequence[str]) -> str:
    kind, ctx, message = detail["type"], detail.get("ctx") or {}, detail["msg"]
    if kind == "extra_forbidden":
        return _unknown_field(str(detail["loc"][-1]), known_fields)
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "non-empty text"
    if kind in _PHRASES:
        return _PHRASES[kind].format(**ctx)
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return message.removeprefix("Input should be ")


def _unknown_field(name: str, known_fields: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known_fields, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"no such field: remove it{hint}"


_PHRASES: dict[str, str] = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "text",
    "string_too_short": "text of at least {min_length} character(s)",
    "string_too_long": "text of at most {max_length} characters",
    "too_short": "at least {min_length} item(s)",
    "too_long": "at most {max_length} items",
    "greater_than": "a number greater than {gt}",
    "greater_than_equal": "a number of at least {ge}",
    "less_than": "a number less than {lt}",
    "less_than_equal": "a number of at most {le}",
    "enum": "one of {expected}",
    "literal_error": "one of {expected}",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "an object (names mapped to values)",
    "model_type": "an object (names mapped to values)",
    "model_attributes_type": "an object (names mapped to values)",
    "datetime_type": _DATETIME,
    "datetime_parsing": _DATETIME,
    "datetime_from_date_parsing": _DATETIME,
    "timezone_aware": _DATETIME,
    "json_invalid": "valid JSON",
    "union_tag_invalid": "'{discriminator}' to be one of {expected_tags}",
    "union_tag_not_found": "a '{discriminator}' field",
}
