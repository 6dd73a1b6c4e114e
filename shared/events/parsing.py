"""`parse_event`: the one place a wire body becomes a typed event (upcasting old versions first).

Every consumer of `cf:events`, the outbox relay and the audit replay call this, so decoding,
upcasting and validation behave the same everywhere, and a bad body fails with a message that
names the field and what was expected.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from shared.events import upcasters as _registers_upcasters  # noqa: F401 - fills UPCASTERS
from shared.events.catalog import EVENT_TYPES, Event, current_schema_version
from shared.events.upcasting import UPCASTERS, UpcastError, UpcasterRegistry
from shared.submission.problems import Problem, describe, problems_from

_WHOLE = "(whole input)"


class EventParseError(ValueError):
    """A body that is not a valid cardflow event; `.problems` names each field and what was expected."""

    def __init__(self, problems: list[Problem], *, event_type: str | None = None, event_id: str | None = None):
        self.problems = problems
        self.event_type = event_type
        self.event_id = event_id
        what = " ".join(part for part in (event_type, event_id) if part) or "body"
        super().__init__(f"cannot parse event {what}:\n{describe(problems)}")


def parse_event(body: bytes | str | dict[str, Any], *, registry: UpcasterRegistry = UPCASTERS) -> Event:
    """The typed event in `body` (JSON bytes/text or a decoded dict), upcast to the current schema."""
    raw = _decode(body)
    event_type = _known_type(raw)
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        problem = Problem(field="schema_version", value=_jsonable(version), expected="a whole number >= 1")
        raise EventParseError([problem], event_type=event_type, event_id=event_id)
    data = _upcast(raw.get("data"), event_type, version, registry, event_id)
    raw = {**raw, "schema_version": current_schema_version(event_type), "data": data}
    try:
        return EVENT_TYPES[event_type].model_validate(raw)
    except ValidationError as error:
        raise EventParseError(problems_from(error), event_type=event_type, event_id=event_id) from None


def _decode(body: bytes | str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, (bytes, bytearray, memoryview, str)):
        try:
            body = json.loads(bytes(body) if not isinstance(body, str) else body)
        except (ValueError, UnicodeDecodeError) as error:
            raise EventParseError([Problem(field=_WHOLE, value=_excerpt(body), expected=f"JSON ({error})")]) from None
    if not isinstance(body, dict):
        raise EventParseError([Problem(field=_WHOLE, value=_jsonable(body), expected="a JSON object")])
    return body


def _known_type(raw: dict[str, Any]) -> str:
    event_type = raw.get("type")
    if isinstance(event_type, str) and event_type in EVENT_TYPES:
        return event_type
    expected = "a known event type, one of: " + ", ".join(sorted(EVENT_TYPES))
    if event_type is None:
        expected = "an event type (the field is missing), one of: " + ", ".join(sorted(EVENT_TYPES))
    raise EventParseError([Problem(field="type", value=_jsonable(event_type), expected=expected)])


def _upcast(data: Any, event_type: str, version: int, registry: UpcasterRegistry, event_id: str | None) -> Any:
    current = current_schema_version(event_type)
    if version == current or (not isinstance(data, dict) and version < current):
        return data  # nothing to do, or a missing/broken payload that validation will report
    try:
        return registry.upcast(event_type, version, data, to_version=current)
    except UpcastError as error:
        problem = Problem(field="schema_version", value=version, expected=f"a readable version ({error})")
    except (KeyError, TypeError, ValueError) as error:
        problem = Problem(field="data", value=None, expected=f"a v{version} payload the upcaster can read ({error!r})")
    raise EventParseError([problem], event_type=event_type, event_id=event_id)


def _excerpt(body: bytes | bytearray | memoryview | str) -> str:
    text = body if isinstance(body, str) else bytes(body).decode("utf-8", errors="replace")
    return text[:80]


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, (str, int, float, bool, list, dict)) else repr(value)
