"""Property: every event, report, command and submission survives canonical JSON unchanged.

Instances are built by hypothesis (`st.builds`) from each model's own field types and constraints,
so a new event type or field is covered without touching this file.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import string
import types
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import AwareDatetime, BaseModel, JsonValue, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from ulid import ULID

from shared.events import (
    COMMAND_TYPES,
    EVENT_CLASSES,
    REPORT_TYPES,
    Envelope,
    canonical_json,
    parse_command,
    parse_event,
    parse_report,
)
from shared.events.config import ConfigAction, ConfigChangedData, DocumentChangedData, TemplateChangedData
from shared.events.matching import TaskMatchedData, TaskReadinessChangedData
from shared.events.values import GpuIndices
from shared.submission import InputRef, TaskSubmission, validate_submission
from shared.submission.raw import raw_problems
from tests.helpers.canonical_reference import reference_canonical_json

# ---- strategies derived from pydantic field types --------------------------------------------

ulids = st.integers(min_value=0, max_value=2**128 - 1).map(lambda n: str(ULID.from_int(n)))
offsets = st.integers(min_value=-12 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
aware_datetimes = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC) | offsets
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)

TYPE_STRATEGIES: dict[Any, st.SearchStrategy[Any]] = {
    GpuIndices: st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True).map(lambda xs: tuple(sorted(xs))),
    JsonValue: json_values,
}


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    """annotated_types constraints (also those inside nested FieldInfo) as one dict."""
    found: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found.update(_bounds(item.metadata))
            extra = item.json_schema_extra
            if isinstance(extra, dict) and "pattern" in extra:
                found["pattern"] = extra["pattern"]
        name = _CONSTRAINTS.get(type(item))
        if name:
            found[name] = getattr(item, name)
    return found


_CONSTRAINTS = {at.Ge: "ge", at.Gt: "gt", at.Le: "le", at.Lt: "lt", at.MinLen: "min_length", at.MaxLen: "max_length"}


def _number(kind: type, bounds: dict[str, Any]) -> st.SearchStrategy[Any]:
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if kind is int:
        low = None if low is None else int(low) + (1 if "gt" in bounds else 0)
        high = None if high is None else int(high) - (1 if "lt" in bounds else 0)
        return st.integers(min_value=low if low is not None else -(2**40), max_value=high if high is not None else 2**40)
    return st.floats(
        min_value=low, max_value=high if high is not None else 1e12, exclude_min="gt" in bounds,
        exclude_max="lt" in bounds, allow_nan=False, allow_infinity=False,
    )


def _text(bounds: dict[str, Any], metadata: list[Any]) -> st.SearchStrategy[str]:
    if "pattern" in bounds:  # a constrained text type: generate from its regex, keep what it accepts
        adapter = TypeAdapter(Annotated[str, *metadata])
        return st.from_regex(bounds["pattern"], fullmatch=True).filter(functools.partial(_accepts, adapter))
    return st.text(min_size=bounds.get("min_length", 0), max_size=min(bounds.get("max_length", 12), 12))


def _accepts(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def strategy_for(annotation: Any, metadata: list[Any] | None = None) -> st.SearchStrategy[Any]:
    """A strategy for values of `annotation` that satisfy its pydantic constraints."""
    metadata = list(metadata or [])
    if annotation in TYPE_STRATEGIES:
        return TYPE_STRATEGIES[annotation]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return strategy_for(args[0], [*args[1:], *metadata])
    if origin in (Union, types.UnionType):  # constraints of `X | None = Field(gt=0)` apply to X
        constraints = [item for item in metadata if isinstance(item, at.BaseMetadata)]
        return st.one_of([strategy_for(arg, constraints) for arg in args])
    if origin is Literal:
        return st.sampled_from(args)
    bounds = _bounds(metadata)
    if origin is tuple:
        items = strategy_for(args[0])
        size = {"min_size": bounds.get("min_length", 0), "max_size": min(bounds.get("max_length", 3), 3)}
        return st.lists(items, **size).map(tuple)
    if origin is dict:
        return st.dictionaries(strategy_for(args[0]), strategy_for(args[1]), max_size=3)
    return _scalar(annotation, bounds, metadata)


def _scalar(annotation: Any, bounds: dict[str, Any], metadata: list[Any]) -> st.SearchStrategy[Any]:
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_strategy(annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    if annotation is AwareDatetime:
        return aware_datetimes
    if annotation is bool:
        return st.booleans()
    if annotation in (int, float):
        return _number(annotation, bounds)
    if annotation is str:
        return _text(bounds, metadata)
    raise NotImplementedError(f"no strategy for {annotation!r}: add one to TYPE_STRATEGIES")


@functools.cache
def model_strategy(cls: type[BaseModel]) -> st.SearchStrategy[BaseModel]:
    """`st.builds(cls, ...)` with a strategy for every field (optional ones too)."""
    if cls in MODEL_STRATEGIES:
        return MODEL_STRATEGIES[cls]
    fields = {name: strategy_for(f.annotation, [f, *f.metadata]) for name, f in cls.model_fields.items()}
    if issubclass(cls, Envelope):  # the envelope of the current schema, as parse_event produces
        fields |= {"type": st.just(cls.model_fields["type"].default), "event_id": ulids}
        fields["schema_version"] = st.just(cls.model_fields["schema_version"].default)
    return st.builds(functools.partial(_build_or_none, cls), **fields).filter(lambda built: built is not None)


def _build_or_none(cls: type[BaseModel], **values: Any) -> BaseModel | None:
    """The instance, or None when a cross-field rule rejects the combination (filtered out)."""
    try:
        return cls(**values)
    except ValidationError:
        return None


@st.composite
def _readiness(draw: st.DrawFn) -> TaskReadinessChangedData:
    """Ready means nothing missing and a fraction of 1; otherwise at least one missing input."""
    ready = draw(st.booleans())
    missing = () if ready else draw(st.lists(strategy_for(InputRef), min_size=1, max_size=3).map(tuple))
    fraction = 1.0 if ready else draw(st.floats(0, 1, exclude_max=True))
    task_id = draw(st.text(string.ascii_letters, min_size=1))
    return TaskReadinessChangedData(task_id=task_id, ready=ready, missing_inputs=missing, ready_fraction=fraction)


@st.composite
def _matched(draw: st.DrawFn) -> TaskMatchedData:
    """The chosen card type is one of the ranking."""
    fields = {n: f for n, f in TaskMatchedData.model_fields.items() if n != "chosen"}
    values = {name: draw(strategy_for(f.annotation, [f, *f.metadata])) for name, f in fields.items()}
    chosen = draw(st.sampled_from(values["ranking"])).card_type
    return TaskMatchedData(**values, chosen=chosen)


def _document_changed(cls: type[DocumentChangedData]) -> st.SearchStrategy[DocumentChangedData]:
    """Versions follow each other (old = new - 1, none before 1); `rolled_back_to` only for rollbacks."""

    @st.composite
    def build(draw: st.DrawFn) -> DocumentChangedData:
        skip = {"old_version", "new_version", "action", "rolled_back_to", "sha256"}
        fields = {n: f for n, f in cls.model_fields.items() if n not in skip}
        values = {name: draw(strategy_for(f.annotation, [f, *f.metadata])) for name, f in fields.items()}
        new = draw(st.integers(1, 10_000))
        action = draw(st.sampled_from(list(ConfigAction)))
        back_to = draw(st.integers(1, 10_000)) if action is ConfigAction.ROLLED_BACK else None
        sha256 = draw(st.binary(max_size=16).map(lambda body: hashlib.sha256(body).hexdigest()))
        return cls(**values, old_version=new - 1 if new > 1 else None, new_version=new, action=action,
                   rolled_back_to=back_to, sha256=sha256)

    return build()


MODEL_STRATEGIES: dict[type[BaseModel], st.SearchStrategy[Any]] = {
    TaskReadinessChangedData: _readiness(),
    TaskMatchedData: _matched(),
    ConfigChangedData: _document_changed(ConfigChangedData),
    TemplateChangedData: _document_changed(TemplateChangedData),
}

# ---- properties ---------------------------------------------------------------------------

ROUND_TRIP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("event_class", EVENT_CLASSES, ids=lambda cls: cls.model_fields["type"].default)
@ROUND_TRIP
@given(data=st.data())
def test_every_event_survives_canonical_json(event_class: type[Envelope], data: st.DataObject) -> None:
    event = data.draw(model_strategy(event_class))
    body = canonical_json(event)
    assert body == reference_canonical_json(event)  # the audit chain's bytes, as before the encoder was built once
    assert parse_event(body) == event
    assert canonical_json(parse_event(body)) == body  # stable: re-encoding gives the same bytes
    assert parse_event(json.loads(body)) == event  # a decoded dict parses the same


@pytest.mark.parametrize(
    ("message_class", "parse"),
    [(cls, parse_report) for cls in REPORT_TYPES.values()] + [(cls, parse_command) for cls in COMMAND_TYPES.values()],
    ids=lambda value: getattr(value, "__name__", ""),
)
@ROUND_TRIP
@given(data=st.data())
def test_every_report_and_command_survives_json(message_class: type[Envelope], parse: Any, data: st.DataObject) -> None:
    message = data.draw(model_strategy(message_class))
    assert canonical_json(message) == reference_canonical_json(message)
    assert parse(canonical_json(message)) == message
    assert parse(message.model_dump_json()) == message


@ROUND_TRIP
@given(submission=model_strategy(TaskSubmission))
def test_submission_survives_json(submission: TaskSubmission) -> None:
    assume(not raw_problems(submission.model_dump(mode="json")))  # text intake refuses (NUL, surrogates)
    assert canonical_json(submission) == reference_canonical_json(submission)
    assert validate_submission(canonical_json(submission), limits=None) == submission
    assert validate_submission(submission.model_dump(mode="json"), limits=None) == submission
