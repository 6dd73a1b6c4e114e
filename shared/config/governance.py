"""The governance sections of the `policy` document: approvals, reviewers, deadlines, idle reclaim, alerts.

Each is a frozen pydantic model whose every field has a default (a document written before a
section existed stays valid and means what it meant): no approval rules, any reviewer, deadlines
flagged but never holding a task, idle reclaim on (GPUs under 5% for 10 minutes after a 5-minute
start-up grace; a task reclaimed twice is held for a person), alerts to the log and the console
banner, quota watch 15 days ahead, a daily digest at 09:00 Asia/Shanghai.
"""

from __future__ import annotations

from datetime import time
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.alerts import AlertKind
from shared.scheduling.model import PriorityClass
from shared.submission.fields import CardTypeName, ProjectId

_SECTION = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
RuleName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,62}$", description="a short name")]
TokenName = Annotated[str, Field(min_length=1, max_length=128, description="an API token's name (`cardflow token list`)")]


class ApprovalRule(BaseModel):
    """Tasks this rule matches wait in `awaiting approval` until a reviewer approves them. A rule
    matches when EVERY condition it sets holds (estimates are on the matcher's chosen card type)."""

    model_config = _SECTION

    name: RuleName
    cost_above: float | None = Field(None, ge=0, description="the estimated cost is above this")
    gpu_hours_above: float | None = Field(None, ge=0, description="the estimated GPU-hours are above this")
    priority_class: PriorityClass | None = Field(None, description="the task is of this class (e.g. core)")
    projects: tuple[ProjectId, ...] = Field((), description="the task is of one of these projects (empty: any)")
    card_types: tuple[CardTypeName, ...] = Field((), description="it would run on one of these card types (empty: any)")

    @model_validator(mode="after")
    def _sets_a_condition(self) -> ApprovalRule:
        if (self.cost_above, self.gpu_hours_above, self.priority_class) == (None, None, None) and not (
            self.projects or self.card_types
        ):
            raise ValueError(f"approval rule {self.name!r} sets no condition: it would hold every task")
        return self


class ApprovalsSection(BaseModel):
    """Which tasks need a reviewer's approval before they may start (they hold no GPU and no quota meanwhile)."""

    model_config = _SECTION

    rules: tuple[ApprovalRule, ...] = Field((), description="a task matching any rule needs approval")
    alert_after_hours: float = Field(24.0, gt=0, description="alert when a task has waited this long for approval")


class ReviewersSection(BaseModel):
    """Who may approve or deny a project's tasks (tokens with the reviewer role; never the submitter)."""

    model_config = _SECTION

    by_project: dict[ProjectId, tuple[TokenName, ...]] = Field(
        default_factory=dict, description="project -> reviewers' token names"
    )
    default: tuple[TokenName, ...] = Field(
        (), description="reviewers of projects not named above (empty: any token with the reviewer role)"
    )

    def of(self, project: str) -> tuple[str, ...]:
        """The reviewers named for `project` (empty: any reviewer)."""
        return self.by_project.get(project, self.default)


class DeadlinesSection(BaseModel):
    """Tasks with a `deadline`: flagged (and alerted) when their estimated end is past it."""

    model_config = _SECTION

    hold_unreachable: bool = Field(
        False, description="hold a task that would end after its deadline even if it started now (else: run it, flagged)"
    )


class IdleReclaimSection(BaseModel):
    """Leases whose GPUs sit idle are revoked (after a checkpoint) and their tasks requeued."""

    model_config = _SECTION

    enabled: bool = Field(True, description="revoke leases whose GPUs stay idle")
    threshold_pct: float = Field(5.0, ge=0, le=100, description="a lease is idle while its GPUs' mean utilisation is under this")
    window_s: float = Field(600.0, gt=0, description="... for this many seconds in a row")
    grace_s: float = Field(300.0, ge=0, description="start-up grace: idleness counts only this long after the grant")
    hold_after: int = Field(2, ge=1, description="after this many reclaims the task is held for a person to look at")


class SinkKind(StrEnum):
    WEBHOOK = "webhook"  # JSON POST to `url`, retried with back-off, dead-lettered after `attempts`
    LOG = "log"  # a warning line in the ledger's log
    CONSOLE = "console"  # the console's banner (GET /v1/alerts)


class AlertSink(BaseModel):
    """Where alerts go."""

    model_config = _SECTION

    kind: SinkKind
    url: str | None = Field(None, pattern=r"^https?://\S+$", description="webhook: where to POST")
    kinds: tuple[AlertKind, ...] = Field((), description="only these alert kinds (empty: every kind)")

    @model_validator(mode="after")
    def _webhook_has_url(self) -> AlertSink:
        if (self.kind is SinkKind.WEBHOOK) != (self.url is not None):
            raise ValueError("a webhook sink needs a url, and only a webhook sink has one")
        return self

    def wants(self, kind: AlertKind) -> bool:
        return not self.kinds or kind in self.kinds


class AlertDigest(BaseModel):
    """The daily digest: once a day at `at` (local time in `timezone`) the ledger sends the alerts of the
    last 24 hours to every webhook sink (one JSON POST, retried like an alert) and log sink."""

    model_config = _SECTION

    enabled: bool = Field(True, description="send the daily digest")
    at: str = Field("09:00", pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$", description="local time of day, HH:MM (24 h)")
    timezone: str = Field(
        "Asia/Shanghai", description="IANA time zone of `at` (Asia/Shanghai: China Standard Time, the first users'; or UTC)"
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}: give an IANA name such as Asia/Shanghai or UTC") from None
        return value

    @property
    def time_of_day(self) -> time:
        hours, minutes = self.at.split(":")
        return time(int(hours), int(minutes))


class AlertsSection(BaseModel):
    """Alerts and where they go; how far ahead important work is watched; the daily digest."""

    model_config = _SECTION

    sinks: tuple[AlertSink, ...] = Field(
        (AlertSink(kind=SinkKind.LOG), AlertSink(kind=SinkKind.CONSOLE)), description="where every alert goes"
    )
    watch_lead_days: float = Field(
        15.0, ge=0, description="alert when a core task's estimated end is within this of its quota's expiry"
    )
    reminder_days: tuple[float, ...] = Field((7.0, 3.0, 1.0), description="... and again when that many days are left")
    webhook_attempts: int = Field(6, ge=1, le=50, description="a webhook delivery is dead-lettered after this many tries")
    webhook_backoff_s: float = Field(2.0, gt=0, description="first retry after this; each next one waits twice as long")
    webhook_timeout_s: float = Field(5.0, gt=0, description="one POST may take this long")
    digest: AlertDigest = Field(default_factory=AlertDigest, description="the daily digest to the webhook and log sinks")
