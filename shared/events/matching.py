"""Events readiness and the matcher write: is the data there, and which card type fits best."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from shared.events.envelope import Envelope, Payload
from shared.events.reasons import UnmatchableReason
from shared.events.values import Detail, EntityId, Fraction, NonNegative, Positive
from shared.submission import InputRef


class TaskReadinessChangedData(Payload):
    task_id: EntityId
    ready: bool = Field(description="every input is available")
    missing_inputs: tuple[InputRef, ...] = Field((), description="inputs not available yet")
    ready_fraction: Fraction = Field(description="share of the task's inputs that are available")

    @model_validator(mode="after")
    def _ready_means_nothing_missing(self) -> TaskReadinessChangedData:
        if self.ready and (self.missing_inputs or self.ready_fraction != 1.0):
            raise ValueError("a ready task has no missing inputs and a ready_fraction of 1")
        if not self.ready and not self.missing_inputs:
            raise ValueError("a task that is not ready names at least one missing input")
        return self


class TaskReadinessChanged(Envelope):
    """A task's inputs became ready, or stopped being ready, or the share of ready inputs moved."""

    type: Literal["task.readiness_changed"] = "task.readiness_changed"
    data: TaskReadinessChangedData


class CardEstimate(Payload):
    """What one adequate card type would take for a task."""

    card_type: EntityId
    est_runtime_s: Positive = Field(description="estimated wall-clock runtime on this card type")
    est_cost: NonNegative = Field(description="estimated cost = runtime x GPUs x price per GPU-hour")


class TaskMatchedData(Payload):
    task_id: EntityId
    ranking: tuple[CardEstimate, ...] = Field(min_length=1, description="adequate card types, best first")
    chosen: EntityId = Field(description="the card type the task will be placed on first")
    reason: Detail = Field(description="why the chosen card type, in a sentence")
    oversized: bool = Field(False, description="the chosen card type is far more than the task needs")
    catalog_version: str | None = Field(None, description="object version of cards.yaml used")

    @model_validator(mode="after")
    def _chosen_is_ranked(self) -> TaskMatchedData:
        if self.chosen not in {option.card_type for option in self.ranking}:
            raise ValueError(f"chosen card type {self.chosen!r} is not in the ranking")
        return self


class TaskMatched(Envelope):
    """The matcher ranked the adequate card types for a task and chose one."""

    type: Literal["task.matched"] = "task.matched"
    data: TaskMatchedData


class TaskUnmatchableData(Payload):
    task_id: EntityId
    reason: UnmatchableReason
    detail: Detail


class TaskUnmatchable(Envelope):
    """No card type in the catalog can run the task (a catalog change may fix that)."""

    type: Literal["task.unmatchable"] = "task.unmatchable"
    data: TaskUnmatchableData
