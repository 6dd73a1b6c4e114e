"""What is wrong with a decoded JSON body before any field is looked at (pure).

`raw_problems(body)` walks the body without recursion and reports, each at its own path, what no
field of any schema may hold: nesting deeper than `MAX_DEPTH`, text PostgreSQL cannot store (NUL,
unpaired surrogates — in values and in keys) and numbers that are not finite (NaN, Infinity, or
a literal too large for a float, which Python's JSON reader turns into Infinity).
"""

from __future__ import annotations

from typing import Any

from shared.submission.limits import MAX_DEPTH
from shared.submission.problems import Problem, field_path
from shared.submission.storable import is_finite_number, storable, storable_text, unstorable_text

MAX_RAW_PROBLEMS = 50
_TEXT_EXPECTED = {
    "NUL": "text without NUL characters (\\u0000), which cannot be stored",
    "surrogate": "valid Unicode text (an unpaired surrogate such as \\ud800 is not)",
}
_FINITE_EXPECTED = "a finite number (JSON has no NaN or Infinity)"
_DEPTH_EXPECTED = f"at most {MAX_DEPTH} levels of nesting"


def raw_problems(body: Any, max_depth: int = MAX_DEPTH) -> list[Problem]:
    """Every problem of the kinds in the module docstring (at most `MAX_RAW_PROBLEMS`), in body order."""
    problems: list[Problem] = []
    pending: list[tuple[tuple[int | str, ...], Any, int]] = [((), body, 0)]
    while pending and len(problems) < MAX_RAW_PROBLEMS:
        loc, value, depth = pending.pop()
        if isinstance(value, (dict, list, tuple)) and depth >= max_depth:
            problems.append(Problem(field=_path(loc), value=storable(value, max_depth=1, max_items=3), expected=_DEPTH_EXPECTED))
            continue
        problem = _scalar_problem(loc, value)
        if problem is not None:
            problems.append(problem)
        pending.extend(reversed(_children(loc, value, depth, problems)))
    return problems


def _children(
    loc: tuple[int | str, ...], value: Any, depth: int, problems: list[Problem]
) -> list[tuple[tuple[int | str, ...], Any, int]]:
    if isinstance(value, dict):
        for key in value:
            reason = unstorable_text(key) if isinstance(key, str) else None
            if reason is not None:
                problems.append(Problem(field=_path((*loc, key)), value=storable_text(key, 80), expected=f"a field name: {_TEXT_EXPECTED[reason]}"))
        return [((*loc, str(key)), item, depth + 1) for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [((*loc, index), item, depth + 1) for index, item in enumerate(value)]
    return []


def _scalar_problem(loc: tuple[int | str, ...], value: Any) -> Problem | None:
    if isinstance(value, str):
        reason = unstorable_text(value)
        if reason is not None:
            return Problem(field=_path(loc), value=storable_text(value, 80), expected=_TEXT_EXPECTED[reason])
    elif not is_finite_number(value):
        return Problem(field=_path(loc), value=storable(value), expected=_FINITE_EXPECTED)
    return None


def _path(loc: tuple[int | str, ...]) -> str:
    return storable_text(field_path(loc), 300)
