"""Input checks and readiness decisions (pure: no I/O, no clock).

- `plan_input_checks(inputs)`: what proves each input is there — an S3 HEAD of the object, an
  S3 HEAD of `<prefix>_READY` for a prefix, or a `data.ready_signalled` for `{dataset, version}`;
- `merge_probe(known, probe)`: an input's availability after a probe. Availability is sticky
  (once seen, an input stays available) and an error never changes what was known;
- `assess(states)`: the task's readiness, or None while some input's state is still unknown;
- `needs_event(previous, current)`: emit `task.readiness_changed` at the first assessment and
  whenever readiness, the missing inputs or the ready fraction change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shared.submission import DatasetRef, parse_s3_uri

InputRef = str | DatasetRef


class InputKind(StrEnum):
    """How an input's availability is established."""

    OBJECT = "object"  # S3 HEAD of the object itself
    PREFIX = "prefix"  # S3 HEAD of <prefix>_READY (the producer writes the marker last)
    DATASET = "dataset"  # a data.ready_signalled for that dataset version was seen


@dataclass(frozen=True, slots=True)
class InputCheck:
    """The check of one task input: `key` is what is probed (`s3://bucket/key`) or signalled (`name@version`)."""

    position: int
    ref: InputRef
    kind: InputKind
    key: str
    bucket: str | None = None
    object_key: str | None = None

    @property
    def is_s3(self) -> bool:
        return self.kind is not InputKind.DATASET


class Probe(StrEnum):
    """What one S3 HEAD answered."""

    FOUND = "found"
    NOT_FOUND = "not_found"
    ERROR = "error"  # anything but "not found": transient, retried later, never a verdict


@dataclass(frozen=True, slots=True)
class Readiness:
    """A task's readiness as `task.readiness_changed` reports it."""

    ready: bool
    missing: tuple[InputRef, ...]
    ready_fraction: float


@dataclass(frozen=True, slots=True)
class InputState:
    """An input as last recorded; `signal_event_id`: the `data.ready_signalled` that made its dataset
    version ready, if one has."""

    position: int
    ref: InputRef
    kind: InputKind
    key: str
    available: bool | None
    signal_event_id: str | None = None

    @property
    def signalled(self) -> bool:
        return self.signal_event_id is not None


@dataclass(frozen=True, slots=True)
class Review:
    """The outcome of re-checking one task: each input's availability, the readiness, and
    whether a `task.readiness_changed` is due."""

    availability: tuple[bool | None, ...]
    readiness: Readiness | None
    emit: bool


def plan_input_checks(inputs: Sequence[InputRef]) -> list[InputCheck]:
    """One check per input, in input order."""
    return [plan_input_check(position, ref) for position, ref in enumerate(inputs)]


def plan_input_check(position: int, ref: InputRef) -> InputCheck:
    if isinstance(ref, DatasetRef):
        return InputCheck(position, ref, InputKind.DATASET, dataset_key(ref.dataset, ref.version))
    location = parse_s3_uri(ref)
    probed = location.ready_marker_key or location.key
    kind = InputKind.PREFIX if location.is_prefix else InputKind.OBJECT
    return InputCheck(position, ref, kind, f"s3://{location.bucket}/{probed}", location.bucket, probed)


def dataset_key(dataset: str, version: str) -> str:
    return f"{dataset}@{version}"


def merge_probe(known: bool | None, probe: Probe | None) -> bool | None:
    """Availability after `probe` (None = not probed this time): sticky True, errors change nothing."""
    if known is True or probe is None or probe is Probe.ERROR:
        return known
    return probe is Probe.FOUND


def refresh(state: InputState, probes: Mapping[str, Probe]) -> bool | None:
    """An input's availability now: datasets from signals, S3 inputs from this round's probes."""
    if state.kind is InputKind.DATASET:
        return bool(state.available or state.signalled)
    return merge_probe(state.available, probes.get(state.key))


def review(inputs: Sequence[InputState], previous: Readiness | None, probes: Mapping[str, Probe]) -> Review:
    """Re-check one task: refresh every input, assess, compare with what was last reported."""
    availability = tuple(refresh(state, probes) for state in inputs)
    current = assess([(state.ref, available) for state, available in zip(inputs, availability, strict=True)])
    return Review(availability, current, needs_event(previous, current))


def assess(states: Sequence[tuple[InputRef, bool | None]]) -> Readiness | None:
    """Readiness from each input's availability; None while any input is still unknown."""
    if any(available is None for _, available in states):
        return None
    if not states:
        return Readiness(ready=True, missing=(), ready_fraction=1.0)
    missing = tuple(ref for ref, available in states if not available)
    fraction = (len(states) - len(missing)) / len(states)
    return Readiness(ready=not missing, missing=missing, ready_fraction=fraction)


def needs_event(previous: Readiness | None, current: Readiness | None) -> bool:
    """True at the first assessment and on every change; never while the state is unknown."""
    return current is not None and current != previous


def ref_to_json(ref: InputRef) -> Any:
    """An input as stored and carried in events: the URI text or `{dataset, version}`."""
    return ref.model_dump() if isinstance(ref, DatasetRef) else ref


def ref_from_json(value: Any) -> InputRef:
    return DatasetRef.model_validate(value) if isinstance(value, dict) else str(value)


def describe_ref(ref: InputRef) -> str:
    """An input as one line of text: the URI, or `dataset@version`."""
    return str(ref)


def signal_that_readied(inputs: Sequence[InputState], availability: Sequence[bool | None]) -> str | None:
    """The newest signal among the inputs this review made available, if a signal made any.

    A re-check's cause is what changed the data, whoever noticed it: the sweep may see a signal
    before the signal's own handler re-checks the task, and the report still names the signal.
    """
    signals = [
        state.signal_event_id
        for state, now in zip(inputs, availability, strict=True)
        if now and not state.available and state.signal_event_id is not None
    ]
    return max(signals, default=None)  # event ids are ULIDs: the largest is the newest
