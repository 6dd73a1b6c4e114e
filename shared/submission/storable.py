"""Text and numbers PostgreSQL can store, and copies of hostile values that it can.

PostgreSQL's `text` and `jsonb` refuse the NUL character and any text that is not valid UTF-8
(Python strings may hold unpaired surrogates, e.g. from the JSON escape `"\\ud800"`), and JSON
has no NaN or Infinity. A submission holding any of them is rejected (`shared.submission.raw`);
what is kept of it for display — the rejected body, the value a problem shows — goes through
`storable`, which writes such characters as visible escapes (`\\u0000`, `\\ud800`), non-finite
numbers as text, and cuts deep or long values short.
"""

from __future__ import annotations

import math
from typing import Any

CUT = "…"
NUL = "\x00"


def unstorable_text(text: str) -> str | None:
    """Why PostgreSQL cannot store `text` (`"NUL"` / `"surrogate"`), or None when it can."""
    if NUL in text:
        return "NUL"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "surrogate"
    return None


def storable_text(text: str, max_chars: int | None = None) -> str:
    """`text` with NUL and unpaired surrogates written as escapes, cut to `max_chars`."""
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars] + CUT
    if unstorable_text(text) is None:
        return text
    return text.replace(NUL, "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def is_finite_number(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def storable(value: Any, *, max_depth: int = 64, max_chars: int | None = None, max_items: int | None = None) -> Any:
    """A copy of a decoded JSON value that PostgreSQL's jsonb accepts (see the module docstring).

    Containers deeper than `max_depth` become `"…"`; with `max_items`, longer lists and objects
    keep their first items and end with `"…"`. Values of other types are returned as they are.
    """
    if isinstance(value, str):
        return storable_text(value, max_chars)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, (list, tuple, dict)) and max_depth <= 0:
        return CUT
    options = {"max_depth": max_depth - 1, "max_chars": max_chars, "max_items": max_items}
    if isinstance(value, (list, tuple)):
        kept = [storable(item, **options) for item in value[:max_items]]
        return kept + [CUT] if max_items is not None and len(value) > max_items else kept
    if isinstance(value, dict):
        items = list(value.items())
        kept_items = {storable_text(str(k), max_chars): storable(v, **options) for k, v in items[:max_items]}
        if max_items is not None and len(items) > max_items:
            kept_items[CUT] = CUT
        return kept_items
    return value
