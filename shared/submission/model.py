"""The task submission schema, version 1: what an upstream system sends to create a task.

`TaskSubmission` is a frozen pydantic model with unknown fields forbidden. It is the body of
`POST /v1/tasks`, of a `task.submit` entry on `cf:ingest`, of a `cardflow submit` file, and it is
carried verbatim inside the `task.submitted` event. Templates (`template: name@version`) are merged
into the raw submission by intake BEFORE validation, so a valid submission is always complete.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Union

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictFloat,
    StrictInt,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from shared.scheduling.model import PriorityClass, Profile
from shared.submission.fields import CardTypeName, EnvName, LabelKey, ProjectId, S3Uri, TemplateRef
from shared.submission.limits import HARD_MAX_ESTIMATE_GPU_HOURS, HARD_MAX_GPUS, HARD_MAX_VRAM_GB, SubmissionLimits

SCHEMA_ID = "urn:cardflow:task-submission:v1"

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
_ONLY_PATTERN_KEYS: dict[str, Any] = {"additionalProperties": False}  # keys must match patternProperties
LIMITS_CONTEXT = "limits"
"""Validation context key holding the `SubmissionLimits` to check (only at intake; see limits.py)."""

MAX_COMMAND_CHARS = 65_536
MAX_ARGS = 1_000
MAX_INPUTS = 1_000
MAX_ENV = 256
MAX_ENV_VALUE_CHARS = 32_768
MAX_LABELS = 64
MAX_LABEL_VALUE_CHARS = 1_024
MAX_CARD_TYPES = 64
MAX_HEAVY = 10
LATEST_DEADLINE = datetime(2200, 1, 1, tzinfo=UTC)


def site_limits_of(info: ValidationInfo) -> SubmissionLimits | None:
    """The site limits this validation checks, or None (parsing an event: fixed bounds only)."""
    return (info.context or {}).get(LIMITS_CONTEXT)


class HeavyResource(StrEnum):
    """A shared node resource a task leans on hard; heavy tasks are spread across nodes."""

    MEMORY = "memory"  # host memory / memory bandwidth of the node
    BANDWIDTH = "bandwidth"  # network or storage bandwidth of the node


def _version_as_text(value: Any) -> Any:
    """YAML writes `version: 3` as a number; a dataset version is text, so accept whole numbers."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class DatasetRef(BaseModel):
    """An input named by dataset and version (resolved to object-storage locations by readiness)."""

    model_config = _FROZEN

    dataset: str = Field(min_length=1, max_length=200, description="dataset name in the data catalog")
    version: Annotated[str, BeforeValidator(_version_as_text)] = Field(
        min_length=1, max_length=100, description="dataset version, e.g. '2024-06-01' or '3'"
    )

    def __str__(self) -> str:
        return f"{self.dataset}@{self.version}"


def _input_form(value: Any) -> str | None:
    if isinstance(value, str):
        return "<uri>"
    if isinstance(value, (dict, DatasetRef)):
        return "<dataset>"
    return None


InputRef = Annotated[
    Union[Annotated[S3Uri, Tag("<uri>")], Annotated[DatasetRef, Tag("<dataset>")]],
    Discriminator(
        _input_form,
        custom_error_type="input_ref",
        custom_error_message="an s3://bucket/key URI or an object {dataset, version}",
    ),
]
"""One task input: an `s3://bucket/key` URI (key ending in `/` = prefix) or a `DatasetRef`."""


def _command_form(value: Any) -> str | None:
    if isinstance(value, str):
        return "<shell>"
    if isinstance(value, (list, tuple)):
        return "<argv>"
    return None


Command = Annotated[
    Union[
        Annotated[
            tuple[Annotated[str, Field(min_length=1, max_length=MAX_COMMAND_CHARS)], ...],
            Field(min_length=1, max_length=MAX_ARGS),
            Tag("<argv>"),
        ],
        Annotated[str, Field(min_length=1, max_length=MAX_COMMAND_CHARS), Tag("<shell>")],
    ],
    Discriminator(
        _command_form,
        custom_error_type="command",
        custom_error_message="a list of arguments (argv) or one shell command line",
    ),
]
"""The task command: an argv list run as is, or a single string run by the shell."""


class CardTypeFilter(BaseModel):
    """Which card types a task accepts: `allow` (None = any adequate type) minus `deny`."""

    model_config = _FROZEN

    allow: tuple[CardTypeName, ...] | None = Field(
        None, min_length=1, max_length=MAX_CARD_TYPES, description="only these card types (omit to allow every adequate type)"
    )
    deny: tuple[CardTypeName, ...] = Field((), max_length=MAX_CARD_TYPES, description="never these card types")

    @model_validator(mode="after")
    def _allow_and_deny_disjoint(self) -> CardTypeFilter:
        both = sorted(set(self.allow or ()) & set(self.deny))
        if both:
            raise PydanticCustomError(
                "card_types_overlap",
                "allow and deny lists without a common card type (both name {both})",
                {"both": ", ".join(both)},
            )
        return self


class CheckpointPolicy(BaseModel):
    """How often the task writes a checkpoint it can resume from after preemption or loss."""

    model_config = _FROZEN

    interval_minutes: StrictFloat = Field(gt=0, le=7 * 24 * 60, description="minutes between checkpoints (at least 1 at intake)")

    @field_validator("interval_minutes")
    @classmethod
    def _not_more_often_than_the_site_allows(cls, value: float, info: ValidationInfo) -> float:
        limits = site_limits_of(info)
        if limits is not None and value < limits.min_checkpoint_interval_minutes:
            raise PydanticCustomError(
                "site_limit",
                "at least {limit} minute(s) between checkpoints (limits.min_checkpoint_interval_minutes)",
                {"limit": f"{limits.min_checkpoint_interval_minutes:g}"},
            )
        return value


class TaskSubmission(BaseModel):
    """A task as submitted (schema v1). Unknown fields are an error."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        title="cardflow task submission v1",
    )
    SCHEMA_ID: ClassVar[str] = SCHEMA_ID

    idempotency_key: str | None = Field(
        None, min_length=1, max_length=200,
        description="resubmitting with the same key returns the existing task instead of a new one",
    )
    name: str = Field(min_length=1, max_length=200, description="human-readable task name")
    project: ProjectId = Field(description="project whose quota pays for the task")
    priority_class: PriorityClass = Field(description="core > standard > opportunistic")
    priority: StrictInt = Field(0, ge=-10_000, le=10_000, description="order within the class; higher first")
    gpus: StrictInt = Field(
        ge=1, le=HARD_MAX_GPUS, description="number of GPUs the task needs (on one node when they fit); at most the site's limit"
    )
    min_vram_gb: StrictFloat | None = Field(None, gt=0, le=HARD_MAX_VRAM_GB, description="minimum memory per GPU, in GB")
    estimate_gpu_hours: StrictFloat = Field(
        gt=0, le=HARD_MAX_ESTIMATE_GPU_HOURS, description="estimated GPU-hours on the reference card; at most the site's limits"
    )
    profile: Profile = Field(description="what bounds the task's speed: compute, memory or balanced")
    heavy: tuple[HeavyResource, ...] | None = Field(
        None, max_length=MAX_HEAVY, description="node resources the task uses heavily (spread across nodes)"
    )
    card_types: CardTypeFilter | None = Field(None, description="allowed / denied card types")
    inputs: tuple[InputRef, ...] = Field((), max_length=MAX_INPUTS, description="data the task needs before it may start")
    command: Command | None = Field(None, description="argv list, or one shell command line")
    env: dict[EnvName, Annotated[str, Field(max_length=MAX_ENV_VALUE_CHARS)]] = Field(
        default_factory=dict, max_length=MAX_ENV, description="extra environment variables",
        json_schema_extra=_ONLY_PATTERN_KEYS,
    )
    image: str | None = Field(None, min_length=1, max_length=500, description="container image, if any")
    checkpoint: CheckpointPolicy | None = Field(None, description="checkpointing cadence")
    template: TemplateRef | None = Field(None, description="template the defaults came from, name@version")
    deadline: AwareDatetime | None = Field(None, description="finish-by time, with a time zone, before 2200")
    output_unit: str | None = Field(
        None, min_length=1, max_length=50, description="what the task's output is counted in, e.g. tokens"
    )
    labels: dict[LabelKey, Annotated[str, Field(max_length=MAX_LABEL_VALUE_CHARS)]] = Field(
        default_factory=dict, max_length=MAX_LABELS, description="free-form key/value tags",
        json_schema_extra=_ONLY_PATTERN_KEYS,
    )

    @field_validator("heavy")
    @classmethod
    def _heavy_as_set(cls, value: tuple[HeavyResource, ...] | None) -> tuple[HeavyResource, ...] | None:
        """`heavy` is a subset: duplicates collapse and the order is canonical."""
        return None if value is None else tuple(sorted(set(value)))

    @field_validator("deadline")
    @classmethod
    def _deadline_in_utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value >= LATEST_DEADLINE:
            raise PydanticCustomError("deadline_too_late", "a date-time before 2200-01-01T00:00:00Z")
        return None if value is None else value.astimezone(UTC)

    @field_validator("gpus")
    @classmethod
    def _gpus_within_site_limit(cls, value: int, info: ValidationInfo) -> int:
        limits = site_limits_of(info)
        if limits is not None and value > limits.max_gpus_per_task:
            raise PydanticCustomError(
                "site_limit",
                "at most {limit} GPUs: the most one task may ask for at this site (limits.max_gpus_per_task)",
                {"limit": limits.max_gpus_per_task},
            )
        return value

    @field_validator("estimate_gpu_hours")
    @classmethod
    def _estimate_within_site_limits(cls, value: float, info: ValidationInfo) -> float:
        """At most the site's largest estimate, and at most its longest run on the task's GPUs."""
        limits = site_limits_of(info)
        if limits is None:
            return value
        if value > limits.max_estimate_gpu_hours:
            raise PydanticCustomError(
                "site_limit", "at most {limit} GPU-hours (limits.max_estimate_gpu_hours)",
                {"limit": f"{limits.max_estimate_gpu_hours:g}"},
            )  # fmt: skip
        gpus = info.data.get("gpus")
        if isinstance(gpus, int) and value / gpus > limits.max_runtime_hours:
            raise PydanticCustomError(
                "site_limit",
                "at most {limit} GPU-hours on {gpus} GPU(s): a run of at most {hours} hours on the"
                " reference card (limits.max_runtime_hours)",
                {"limit": f"{limits.max_runtime_hours * gpus:g}", "gpus": gpus, "hours": f"{limits.max_runtime_hours:g}"},
            )
        return value

    @property
    def is_heavy(self) -> bool:
        """True when the task is memory- or bandwidth-heavy (spread by the dispatcher)."""
        return bool(self.heavy)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of submission v1, as published in docs/."""
        dialect = "https://json-schema.org/draft/2020-12/schema"
        return {"$schema": dialect, "$id": SCHEMA_ID, **cls.model_json_schema()}
