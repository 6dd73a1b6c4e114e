"""Events the ledger writes: usage, quota accounts and their alerts, closed rounds."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, Field, model_validator

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail, EntityId, Fraction, NonNegative, Positive


class LeaseUsageSlice(Payload):
    """What the ledger accounted for one lease over one interval (a `usage.recorded` says one; a
    `usage.batch_recorded` one per lease, all of its project)."""

    lease_id: EntityId
    task_id: EntityId
    card_type: EntityId
    gpu_seconds: NonNegative = Field(description="GPU-seconds used since the previous record of this lease")
    cost: NonNegative = Field(description="gpu_seconds x the card type's price, in the catalog currency")
    output_units: NonNegative = Field(0.0, description="output produced since the previous record")
    from_at: AwareDatetime | None = Field(None, description="start of the accounted interval (None in events before it was added)")
    to_at: AwareDatetime | None = Field(None, description="end of the accounted interval")
    gpus: int | None = Field(None, ge=1, description="GPUs the lease holds (quotas cut intervals at their window's edges)")
    idle_gpu_seconds: NonNegative = Field(0.0, description="of gpu_seconds, those its GPUs sat under the idle threshold")


UNKNOWN_PROJECT = "unknown"
"""The project a usage slice names when the ledger had not yet seen its task's `task.submitted` (it books
the lease to the task's project once that arrives; readers resolve it through the task likewise)."""


class UsageRecordedData(LeaseUsageSlice):
    project: EntityId  # `UNKNOWN_PROJECT` when the ledger had not yet seen the task


class UsageRecorded(Envelope):
    """GPU time and output of one lease since its previous record (from heartbeats). The ledger writes them
    carried by a `usage.batch_recorded` now; events archived before were written on their own."""

    type: Literal["usage.recorded"] = "usage.recorded"
    data: UsageRecordedData


class UsageBatchRecordedData(Payload):
    project: EntityId
    slices: tuple[LeaseUsageSlice, ...] = Field(
        min_length=1, description="one per lease of the project the ledger batch accounted: what a usage.recorded of"
        " its own said, but the project"
    )

    @model_validator(mode="after")
    def _one_slice_per_lease(self) -> UsageBatchRecordedData:
        if len({piece.lease_id for piece in self.slices}) != len(self.slices):
            raise ValueError("a lease has at most one slice per event")
        return self


class UsageBatchRecorded(Envelope):
    """The usage one ledger batch accounted for one project: a `usage.recorded` per lease, carried
    (`shared.events.carried.carried_usage`), so a batch is one event and one delivery per consumer."""

    type: Literal["usage.batch_recorded"] = "usage.batch_recorded"
    data: UsageBatchRecordedData


class QuotaGrantedData(Payload):
    account_id: EntityId
    project: EntityId
    gpu_hours: Positive
    card_type: EntityId | None = Field(None, description="only this card type; None = any")
    valid_from: AwareDatetime
    valid_to: AwareDatetime
    alert_lead_days: float = Field(15.0, ge=0, description="warn this many days before valid_to")
    thresholds: tuple[Fraction, ...] = Field((0.8, 0.95), description="alert when used share crosses these")
    reason: Detail = Field("", description="why it was granted (the actor says who)")
    used_gpu_hours: NonNegative = Field(
        0.0, description="usage inside the window already recorded when the account was granted (a window may start in"
        " the past); later usage.recorded events add to it"
    )

    @model_validator(mode="after")
    def _window_is_forward(self) -> QuotaGrantedData:
        if self.valid_to <= self.valid_from:
            raise ValueError("valid_to must be after valid_from")
        return self


class QuotaGranted(Envelope):
    """A project received a GPU-hour budget for a validity window."""

    type: Literal["quota.granted"] = "quota.granted"
    data: QuotaGrantedData


class QuotaChange(StrEnum):
    """What a `quota.adjusted` does to an account."""

    ADJUST = "adjust"  # GPU-hours added or removed (and maybe a new end)
    RENEW = "renew"  # a later end of validity (and maybe GPU-hours added): a held long task may start


class QuotaAdjustedData(Payload):
    account_id: EntityId
    project: EntityId
    delta_gpu_hours: float = Field(description="added (positive) or removed (negative) GPU-hours")
    valid_to: AwareDatetime | None = Field(None, description="new end of validity; None = unchanged")
    reason: Detail
    change: QuotaChange = Field(QuotaChange.ADJUST, description="adjust | renew")
    used_gpu_hours: NonNegative | None = Field(
        None, description="the account's usage under its new terms when it changed (None in events before it was"
        " added: unchanged); later usage.recorded events add to it"
    )


class QuotaAdjusted(Envelope):
    """Someone (the envelope's actor) changed a quota account."""

    type: Literal["quota.adjusted"] = "quota.adjusted"
    data: QuotaAdjustedData


class QuotaThresholdCrossedData(Payload):
    account_id: EntityId
    project: EntityId
    threshold: Fraction
    used_gpu_hours: NonNegative
    total_gpu_hours: Positive


class QuotaThresholdCrossed(Envelope):
    """A quota account's used share went past one of its alert thresholds."""

    type: Literal["quota.threshold_crossed"] = "quota.threshold_crossed"
    data: QuotaThresholdCrossedData


class QuotaExpiringData(Payload):
    account_id: EntityId
    project: EntityId
    valid_to: AwareDatetime
    remaining_gpu_hours: NonNegative


class QuotaExpiring(Envelope):
    """A quota account with hours left expires within its alert lead time."""

    type: Literal["quota.expiring"] = "quota.expiring"
    data: QuotaExpiringData


class RoundClosedData(Payload):
    round_id: EntityId
    starts_at: AwareDatetime
    ends_at: AwareDatetime
    note: Detail = Field(description="the one-line retrospective note")
    report_uri: str | None = Field(None, description="where the round report is stored")
    gpu_hours: NonNegative = 0.0
    cost: NonNegative = 0.0


class RoundClosed(Envelope):
    """An accounting round (a week, a month) closed with its report and retrospective note."""

    type: Literal["round.closed"] = "round.closed"
    data: RoundClosedData


class RoundNoteAmendedData(Payload):
    round_id: EntityId
    version: int = Field(ge=2, description="the note's new version (1 is the note the round was closed with)")
    note: Detail = Field(description="the amended one-line retrospective note")
    reason: Detail = ""


class RoundNoteAmended(Envelope):
    """Someone (the actor) amended a closed round's retrospective note; earlier versions are kept."""

    type: Literal["round.note_amended"] = "round.note_amended"
    data: RoundNoteAmendedData
