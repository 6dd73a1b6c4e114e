"""`parse_event`: the one place a wire body becomes a typed event (upcasting old versions first).

Every consumer of `cf:events`, the outbox relay and the audit replay call this, so decoding,
upcasting and validation behave the same everywhere, and a bad body fails with a message that
names the field and what was expected. `parse_report` and `parse_command` do the same for agent
reports and dispatcher commands, which share the envelope but are not events.

Fast path: a JSON body is first validated in one step by pydantic's JSON parser against the
discriminated union of its kind (`TypeAdapter.validate_json`, about a third of the cost of
`json.loads` + `model_validate`). Its result is kept only when the body already is at the current
schema version; a body that needs upcasting, or that does not validate, takes the general path,
which upcasts and reports every problem exactly as before.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError

from shared.events import upcasters as _registers_upcasters  # noqa: F401 - fills UPCASTERS
from shared.events.catalog import (
    COMMAND_TYPES,
    EVENT_ADAPTER,
    EVENT_TYPES,
    REPORT_TYPES,
    Event,
    current_schema_version,
)
from shared.events.envelope import Envelope
from shared.events.reports import AgentCommand, AgentReport
from shared.events.upcasting import UPCASTERS, UpcastError, UpcasterRegistry
from shared.submission.problems import Problem, describe, problems_from

_WHOLE = "(whole input)"
_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "event": EVENT_ADAPTER,
    "report": TypeAdapter(AgentReport),
    "command": TypeAdapter(AgentCommand),
}


class EventParseError(ValueError):
    """A body that is not a valid cardflow event; `.problems` names each field and what was expected."""

    def __init__(
        self, problems: list[Problem], *, event_type: str | None = None, event_id: str | None = None, kind: str = "event"
    ) -> None:
        self.problems = problems
        self.event_type = event_type
        self.event_id = event_id
        what = " ".join(part for part in (event_type, event_id) if part) or "body"
        super().__init__(f"cannot parse {kind} {what}:\n{describe(problems)}")


def parse_event(body: bytes | str | dict[str, Any], *, registry: UpcasterRegistry = UPCASTERS) -> Event:
    """The typed event in `body` (JSON bytes/text or a decoded dict), upcast to the current schema."""
    return _parse(body, EVENT_TYPES, registry, "event")  # type: ignore[return-value]


def parse_report(body: bytes | str | dict[str, Any], *, registry: UpcasterRegistry = UPCASTERS) -> AgentReport:
    """The typed agent report in `body` (from `cf:reports`), upcast to the current schema."""
    return _parse(body, REPORT_TYPES, registry, "report")  # type: ignore[return-value]


def parse_command(body: bytes | str | dict[str, Any], *, registry: UpcasterRegistry = UPCASTERS) -> AgentCommand:
    """The typed dispatcher command in `body` (from an agent's inbox), upcast to the current schema."""
    return _parse(body, COMMAND_TYPES, registry, "command")  # type: ignore[return-value]


def _parse(body: Any, types: dict[str, type[Envelope]], registry: UpcasterRegistry, kind: str) -> Envelope:
    fast = _parse_current_json(body, kind)
    if fast is not None:
        return fast
    raw = _decode(body, kind)
    event_type = _known_type(raw, types, kind)
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        problem = Problem(field="schema_version", value=_jsonable(version), expected="a whole number >= 1")
        raise EventParseError([problem], event_type=event_type, event_id=event_id, kind=kind)
    data = _upcast(raw.get("data"), event_type, version, registry, event_id)
    raw = {**raw, "schema_version": current_schema_version(event_type), "data": data}
    try:
        return types[event_type].model_validate(raw)
    except ValidationError as error:
        raise EventParseError(problems_from(error), event_type=event_type, event_id=event_id, kind=kind) from None


def _parse_current_json(body: Any, kind: str) -> Envelope | None:
    """The message in a JSON `body` validated in one step, if it is valid at the current schema
    version; None sends the body down the general path (upcasting, or the detailed error)."""
    if not isinstance(body, (bytes, bytearray, memoryview, str)):
        return None
    try:
        message: Envelope = _ADAPTERS[kind].validate_json(body if not isinstance(body, memoryview) else bytes(body))
    except ValidationError:
        return None
    return message if message.schema_version == current_schema_version(message.type) else None


def _decode(body: bytes | str | dict[str, Any], kind: str) -> dict[str, Any]:
    if isinstance(body, (bytes, bytearray, memoryview, str)):
        try:
            body = json.loads(bytes(body) if not isinstance(body, str) else body)
        except (ValueError, UnicodeDecodeError) as error:
            problem = Problem(field=_WHOLE, value=_excerpt(body), expected=f"JSON ({error})")
            raise EventParseError([problem], kind=kind) from None
    if not isinstance(body, dict):
        raise EventParseError([Problem(field=_WHOLE, value=_jsonable(body), expected="a JSON object")], kind=kind)
    return body


def _known_type(raw: dict[str, Any], types: dict[str, type[Envelope]], kind: str) -> str:
    event_type = raw.get("type")
    if isinstance(event_type, str) and event_type in types:
        return event_type
    known = ", ".join(sorted(types))
    expected = f"a known {kind} type, one of: {known}"
    if event_type is None:
        expected = f"the {kind} type (the field is missing), one of: {known}"
    raise EventParseError([Problem(field="type", value=_jsonable(event_type), expected=expected)], kind=kind)


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
