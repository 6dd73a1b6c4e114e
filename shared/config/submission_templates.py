"""Submission templates: named, versioned sets of submission defaults, and how intake applies them.

A template document (`templates/<name>`):

    description: fine-tuning on one H100 node, checkpoints every 30 min
    defaults:                  # any submission field except `template` and `idempotency_key`
      project: llm
      priority_class: standard
      gpus: 8
      env: {NCCL_DEBUG: WARN}

A submission names `template: NAME@VERSION`, or `template: NAME` (pinned at intake to the latest
version). `apply_template` merges: the submission's own fields win; `env` and `labels` merge key
by key (the submission's keys win); every other field is taken whole from whichever side has it.
The merged submission is then validated as a whole and carries `template: "NAME@VERSION"`.

Pure: the caller looks templates up (`TemplateLookup`); nothing here does I/O.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from shared.config.documents import TEMPLATE_NAME_PATTERN
from shared.submission import Problem, TaskSubmission

NOT_TEMPLATED = frozenset({"template", "idempotency_key"})
"""Submission fields a template may not set: the reference itself, and a key every task would share."""
MERGED_BY_KEY = frozenset({"env", "labels"})
"""Mapping fields merged key by key (the submission's keys win)."""

_CALL = re.compile(rf"^(?P<name>{TEMPLATE_NAME_PATTERN})(?:@(?P<version>[0-9]{{1,9}}))?$")
TEMPLATE_FIELD = "template"
CALL_EXPECTED = "a template name, or name@version with a whole version number, e.g. 'llm-finetune' or 'llm-finetune@3'"


def _partial_submission() -> type[BaseModel]:
    """A model with every templatable submission field, each optional, with the same rules."""
    fields: dict[str, Any] = {}
    for name, info in TaskSubmission.model_fields.items():
        if name in NOT_TEMPLATED:
            continue
        optional = copy.copy(info)
        optional.default, optional.default_factory = None, None
        fields[name] = (info.annotation | None, optional)
    config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    return create_model("SubmissionDefaults", __config__=config, **fields)


SubmissionDefaults = _partial_submission()
"""Any subset of the submission fields (schema v1) except `template` and `idempotency_key`."""


class TemplateDocument(BaseModel):
    """`templates/<name>.yaml`: what the template is for, and the defaults it gives."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, title="cardflow submission template")

    description: str = Field("", max_length=2000, description="what the template is for")
    defaults: SubmissionDefaults = Field(  # type: ignore[valid-type]
        default_factory=SubmissionDefaults, description="submission fields applied unless the submission sets them"
    )

    def default_fields(self) -> dict[str, Any]:
        """The defaults the template sets, as JSON values (fields it leaves out are absent)."""
        return self.defaults.model_dump(mode="json", exclude_unset=True, exclude_none=True)


@dataclass(frozen=True, slots=True)
class TemplateCall:
    """What a submission's `template` field asks for: a name, and a version unless "the latest"."""

    name: str
    version: int | None

    def pinned(self, version: int) -> str:
        return f"{self.name}@{version}"


@dataclass(frozen=True, slots=True)
class FoundTemplate:
    """A template version the lookup found."""

    name: str
    version: int
    document: TemplateDocument

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


TemplateLookup = Callable[[TemplateCall], FoundTemplate | Problem]
"""Finds the template a call names (the latest version when none is given), or says why not."""


def parse_call(value: Any) -> TemplateCall | Problem:
    """The `template` field of a raw submission as a `TemplateCall`, or the problem with it."""
    match = _CALL.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return Problem(field=TEMPLATE_FIELD, value=value if isinstance(value, (str, int, float)) else str(value),
                       expected=CALL_EXPECTED)
    version = match["version"]
    return TemplateCall(match["name"], int(version) if version is not None else None)


def apply_template(raw: dict[str, Any], found: FoundTemplate) -> dict[str, Any]:
    """The raw submission merged over the template's defaults, pinned to `found`'s version."""
    merged = found.document.default_fields()
    for field, value in raw.items():
        earlier = merged.get(field)
        if field in MERGED_BY_KEY and isinstance(value, dict) and isinstance(earlier, dict):
            merged[field] = {**earlier, **value}
        else:
            merged[field] = value
    merged[TEMPLATE_FIELD] = found.ref
    return merged


def resolve_submission(raw: Any, lookup: TemplateLookup) -> tuple[Any, list[Problem]]:
    """`raw` with its template applied (unchanged when it names none), or the problems why not.

    Run BEFORE validation: the result is validated as a whole by `validate_submission`.
    """
    if not isinstance(raw, dict) or raw.get(TEMPLATE_FIELD) is None:
        return raw, []
    call = parse_call(raw[TEMPLATE_FIELD])
    if isinstance(call, Problem):
        return raw, [call]
    found = lookup(call)
    if isinstance(found, Problem):
        return raw, [found]
    return apply_template(raw, found), []


def unknown_template(call: TemplateCall, versions: int) -> Problem:
    """The problem for a call the store cannot answer (`versions` = how many the template has)."""
    value = call.pinned(call.version) if call.version is not None else call.name
    if versions == 0:
        expected = f"a known template: there is no template {call.name!r} (see `cardflow template list`)"
    else:
        expected = f"a version of template {call.name!r} between 1 and {versions}"
    return Problem(field=TEMPLATE_FIELD, value=value, expected=expected)
