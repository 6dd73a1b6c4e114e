"""Screening submissions (pure): templates, valid or not, duplicates within a batch, what a rejection shows.

`screen(requests, new_id, templates)` decides, for a batch of raw submissions, which are new
tasks, which repeat an idempotency key seen earlier IN THE SAME BATCH, and which are rejected
(with every problem). A submission naming a template is first merged over that template's
defaults (its own fields win) and pinned to the version used (`shared.config.resolve_submission`);
an unknown template or version is a rejection naming the `template` field. Templates are looked
up by the caller. Keys already stored are found by the caller's insert, and `settle_stored_keys`
then decides what a stored key means; nothing here does I/O.

An idempotency key names ONE submission (as resolved: template applied): sent again with the same
body it yields the original task; sent with a different body it is a conflict, rejected with the
problem on `idempotency_key` naming the task that holds the key (HTTP answers 409). A retry that
names a template by name alone is the same submission when it resolves alike under the version the
stored task was pinned to (`retries_to_repin`): a newer template version does not turn a retry
into a conflict.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shared.config import TemplateCall, TemplateLookup, resolve_submission
from shared.config.submission_templates import TEMPLATE_FIELD, parse_call
from shared.submission import (
    DEFAULT_LIMITS,
    Problem,
    SubmissionInvalid,
    SubmissionLimits,
    TaskSubmission,
    validate_submission,
)
from shared.submission.storable import unstorable_text
from shared.submission.validate import read_json_object

MAX_ID_CHARS = 200
AUTO_KEY_PREFIX = "auto:"
WHOLE_INPUT = "(whole input)"


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """One submission to screen: the body as received, who sent it, where it came from."""

    raw: Any
    actor: str
    source: str  # 'http', or 'ingest:<entry id>'


@dataclass(frozen=True, slots=True)
class Accepted:
    """A valid submission that becomes task `task_id` unless its key is already stored."""

    index: int
    request: SubmitRequest
    task_id: str
    submission: TaskSubmission

    @property
    def own_key(self) -> str | None:
        return self.submission.idempotency_key

    @property
    def event_key(self) -> str:
        """The key `task.submitted` carries: the submission's own, else one unique to the task."""
        return self.own_key or f"{AUTO_KEY_PREFIX}{self.task_id}"


@dataclass(frozen=True, slots=True)
class Repeated:
    """A valid submission whose key an earlier submission of the same batch already used, with
    the same body."""

    index: int
    request: SubmitRequest
    first: Accepted


@dataclass(frozen=True, slots=True)
class Rejected:
    """An invalid submission: it gets an id, and what could be read of it is kept for display.
    `conflict_with` is the task holding its idempotency key when that is why it was rejected."""

    index: int
    request: SubmitRequest
    task_id: str
    problems: list[Problem]
    name: str | None
    project: str | None
    idempotency_key: str | None
    conflict_with: str | None = None


Screened = Accepted | Repeated | Rejected


def screen(
    requests: Sequence[SubmitRequest], new_id: Callable[[], str], templates: TemplateLookup,
    limits: SubmissionLimits = DEFAULT_LIMITS,
) -> list[Screened]:
    """One decision per request, in order (see module docstring); submissions are held to `limits`."""
    decisions: list[Screened] = []
    first_by_key: dict[str, Accepted] = {}
    for index, request in enumerate(requests):
        try:
            submission = _validated(request.raw, templates, limits)
        except SubmissionInvalid as invalid:
            decisions.append(rejected(index, request, new_id(), invalid.problems))
            continue
        key = submission.idempotency_key
        if key is not None and key in first_by_key:
            first = first_by_key[key]
            same = first.submission == submission
            decisions.append(Repeated(index, request, first) if same else key_conflict(index, request, new_id(), first.task_id))
            continue
        accepted = Accepted(index, request, new_id(), submission)
        if key is not None:
            first_by_key[key] = accepted
        decisions.append(accepted)
    return decisions


def retries_to_repin(
    decisions: Sequence[Screened], created: set[str], stored: dict[str, tuple[str, TaskSubmission]]
) -> dict[str, SubmitRequest]:
    """Accepted submissions whose key is stored with another body, that name a template by name
    alone, and whose stored task was pinned to another version of that template: task id -> the
    request pinned to the stored task's version, to screen again (`settle_stored_keys(same_as_stored=)`)."""
    repin: dict[str, SubmitRequest] = {}
    for decision in decisions:
        if not isinstance(decision, Accepted) or decision.task_id in created or decision.own_key not in stored:
            continue
        held = stored[decision.own_key][1]
        body = _readable_body(decision.request.raw)
        call, held_call = parse_call(body.get(TEMPLATE_FIELD)), parse_call(held.template)
        if (held != decision.submission and isinstance(call, TemplateCall) and call.version is None
                and isinstance(held_call, TemplateCall) and held_call.name == call.name):  # fmt: skip
            repin[decision.task_id] = replace(decision.request, raw={**body, TEMPLATE_FIELD: held.template})
    return repin


def settle_stored_keys(
    decisions: Sequence[Screened], created: set[str], stored: dict[str, tuple[str, TaskSubmission]],
    new_id: Callable[[], str], same_as_stored: frozenset[str] = frozenset(),
) -> list[Screened]:  # fmt: skip
    """After the insert: an accepted submission whose key was already stored (`stored`: key ->
    (task id, submission)) for a DIFFERENT submission is a conflict; so are its repeats.
    `same_as_stored`: task ids of accepted ones that resolve like the stored one when pinned to
    its template version (a retry, see `retries_to_repin`)."""
    conflicting: set[str] = set()
    settled: list[Screened] = []
    for decision in decisions:
        first = decision.first if isinstance(decision, Repeated) else decision
        key = first.own_key if isinstance(first, Accepted) else None
        if isinstance(first, Accepted) and first.task_id not in created and key in stored:
            holder, held = stored[key]
            differs = held != first.submission and first.task_id not in same_as_stored
            if differs or first.task_id in conflicting:
                conflicting.add(first.task_id)
                own_id = first.task_id if decision is first else new_id()
                settled.append(key_conflict(decision.index, decision.request, own_id, holder))
                continue
        settled.append(decision)
    return settled


def key_conflict(index: int, request: SubmitRequest, task_id: str, holder: str) -> Rejected:
    """The rejection of a submission whose idempotency key task `holder` holds with another body."""
    key = request.raw.get("idempotency_key") if isinstance(request.raw, dict) else None
    problem = Problem(
        field="idempotency_key",
        value=key,
        expected=(
            f"a key not used before for a different submission: task {holder} holds this key with another body"
            " (send the same body to get that task back, or use a new key)"
        ),
    )
    return replace(rejected(index, request, task_id, [problem]), conflict_with=holder)


def _validated(raw: Any, templates: TemplateLookup, limits: SubmissionLimits) -> TaskSubmission:
    """The submission with its template applied, validated as a whole; `SubmissionInvalid` otherwise."""
    resolved, problems = resolve_submission(read_json_object(_as_object(raw)), templates)
    if problems:
        raise SubmissionInvalid(problems)
    return validate_submission(resolved, limits)


def rejected(index: int, request: SubmitRequest, task_id: str, problems: list[Problem]) -> Rejected:
    """A `Rejected` with the name, project and key shown when the raw body had readable ones."""
    raw = _readable_body(request.raw)
    return Rejected(
        index=index,
        request=request,
        task_id=task_id,
        problems=problems,
        name=readable_text(raw.get("name")),
        project=readable_text(raw.get("project")),
        idempotency_key=readable_text(raw.get("idempotency_key")),
    )


def _readable_body(raw: Any) -> dict[str, Any]:
    """The body as an object when it is one (HTTP bodies arrive as bytes), else an empty one."""
    if isinstance(raw, bytes):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return {}
    return raw if isinstance(raw, dict) else {}


def readable_text(value: Any) -> str | None:
    """`value` when it is text usable as a display name or id (1..200 storable chars), else None."""
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and unstorable_text(value) is None:
        return value
    return None


def _as_object(raw: Any) -> dict[str, Any] | bytes:
    """The body as an object, or as the bytes an HTTP client sent (decoded and checked by
    `validate_submission`), or `SubmissionInvalid` naming what arrived instead."""
    if isinstance(raw, (dict, bytes)):
        return raw
    shown = raw if isinstance(raw, (str, int, float, bool, list)) or raw is None else repr(raw)
    raise SubmissionInvalid([Problem(field=WHOLE_INPUT, value=shown, expected="a JSON object (a task submission)")])
