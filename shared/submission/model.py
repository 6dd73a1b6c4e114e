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
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from shared.scheduling.model import PriorityClass, Profile
from shared.submission.fields import CardTypeName, EnvName, LabelKey, ProjectId, S3Uri, TemplateRef

SCHEMA_ID = "urn:cardflow:task-submission:v1"

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
_ONLY_PATTERN_KEYS: dict[str, Any] = {"additionalProperties": False}  # keys must match patternProperties


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
        Annotated[tuple[Annotated[str, Field(min_length=1)], ...], Field(min_length=1), Tag("<argv>")],
        Annotated[str, Field(min_length=1), Tag("<shell>")],
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
        None, min_length=1, description="only these card types (omit to allow every adequate type)"
    )
    deny: tuple[CardTypeName, ...] = Field((), description="never these card types")

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

    interval_minutes: float = Field(gt=0, le=7 * 24 * 60, description="minutes between checkpoints")


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
    priority: int = Field(0, ge=-10_000, le=10_000, description="order within the class; higher first")
    gpus: int = Field(ge=1, description="number of GPUs the task needs (on one node when they fit)")
    min_vram_gb: float | None = Field(None, gt=0, description="minimum memory per GPU, in GB")
    estimate_gpu_hours: float = Field(gt=0, description="estimated GPU-hours on the reference card")
    profile: Profile = Field(description="what bounds the task's speed: compute, memory or balanced")
    heavy: tuple[HeavyResource, ...] | None = Field(
        None, description="node resources the task uses heavily (spread across nodes)"
    )
    card_types: CardTypeFilter | None = Field(None, description="allowed / denied card types")
    inputs: tuple[InputRef, ...] = Field((), description="data the task needs before it may start")
    command: Command | None = Field(None, description="argv list, or one shell command line")
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="extra environment variables", json_schema_extra=_ONLY_PATTERN_KEYS
    )
    image: str | None = Field(None, min_length=1, max_length=500, description="container image, if any")
    checkpoint: CheckpointPolicy | None = Field(None, description="checkpointing cadence")
    template: TemplateRef | None = Field(None, description="template the defaults came from, name@version")
    deadline: AwareDatetime | None = Field(None, description="finish-by time, with a time zone")
    output_unit: str | None = Field(
        None, min_length=1, max_length=50, description="what the task's output is counted in, e.g. tokens"
    )
    labels: dict[LabelKey, str] = Field(
        default_factory=dict, description="free-form key/value tags", json_schema_extra=_ONLY_PATTERN_KEYS
    )

    @field_validator("heavy")
    @classmethod
    def _heavy_as_set(cls, value: tuple[HeavyResource, ...] | None) -> tuple[HeavyResource, ...] | None:
        """`heavy` is a subset: duplicates collapse and the order is canonical."""
        return None if value is None else tuple(sorted(set(value)))

    @field_validator("deadline")
    @classmethod
    def _deadline_in_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    @property
    def is_heavy(self) -> bool:
        """True when the task is memory- or bandwidth-heavy (spread by the dispatcher)."""
        return bool(self.heavy)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of submission v1, as published in docs/."""
        dialect = "https://json-schema.org/draft/2020-12/schema"
        return {"$schema": dialect, "$id": SCHEMA_ID, **cls.model_json_schema()}
