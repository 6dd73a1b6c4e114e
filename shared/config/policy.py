"""The `policy` document: every scheduling knob, one section per concern, and its `Policy`.

    policy = scheduling_policy(document)      # the ONE way services turn the document into a Policy
    document = policy_document(POLICIES["cardflow"])   # a preset (plus overrides) as a document

Each section is a frozen pydantic model whose defaults are the `cardflow` preset's, so a later
issue adds a knob by adding a section (or a field) with a default: documents written before it
stay valid and mean what they meant. Unknown fields are refused ("did you mean ...?").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from shared.config.governance import (
    AlertsSection,
    ApprovalsSection,
    DeadlinesSection,
    IdleReclaimSection,
    ReviewersSection,
)
from shared.leasing.report_limits import ReportLimits
from shared.scheduling.policy_knobs import Policy
from shared.submission.fields import CardTypeName
from shared.submission.limits import SubmissionLimits

_DEFAULT = Policy()
_SECTION = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
ShareOfGpus = Annotated[float, Field(ge=0, le=1)]


class QueueOrder(StrEnum):
    """How the queue is ordered before placement."""

    CARDFLOW = "cardflow"  # class, then priority, then aging, then submit time
    PRIORITY = "priority"  # class and priority only
    FIFO = "fifo"  # submit time only


class QueueSection(BaseModel):
    """Which tasks are eligible and in which order they are considered."""

    model_config = _SECTION

    order: QueueOrder = Field(QueueOrder(_DEFAULT.order), description="cardflow (class, priority, aging) | priority | fifo")
    aging_per_hour: float = Field(
        _DEFAULT.aging_per_hour, ge=0, description="effective-priority points a waiting task gains per hour"
    )
    readiness_gate: bool = Field(_DEFAULT.readiness_gate, description="only tasks whose input data is ready may start")
    head_of_line_blocking: bool = Field(
        _DEFAULT.head_of_line_blocking, description="stop at the first task that does not fit (fifo/priority baselines)"
    )


class HeadroomSection(BaseModel):
    """The share of each card type that standard work may never take (kept for bursts of core work)."""

    model_config = _SECTION

    default: float = Field(
        _DEFAULT.headroom if isinstance(_DEFAULT.headroom, float) else 0.0, ge=0, le=1,
        description="share of every card type not named below",
    )
    per_card_type: dict[CardTypeName, ShareOfGpus] = Field(
        default_factory=dict, description="card type -> share, overriding the default for that type"
    )
    tracks_core: bool = Field(
        _DEFAULT.headroom_tracks_core,
        description="keep at most the GPUs core work holds or waits for on the card type (no core work, no headroom)",
    )
    checkpointing_standard_borrows: bool = Field(
        _DEFAULT.checkpointing_standard_borrows,
        description="standard work that checkpoints may take headroom GPUs as a filler; core work past its grace"
        " preempts it after every opportunistic victim (it loses its checkpoint write)",
    )
    fillers_yield_at_once: bool = Field(
        _DEFAULT.fillers_yield_at_once, description="a core task takes such fillers at once, inside its grace too"
    )
    fillers_after_opportunistic: bool = Field(
        _DEFAULT.fillers_after_opportunistic,
        description="a filler takes headroom GPUs only where no ready opportunistic task waits that the card type's"
        " free GPUs could hold (opportunistic work borrows the headroom first)",
    )


class PlacementSection(BaseModel):
    """Where a task's GPUs go."""

    model_config = _SECTION

    max_heavy_per_node: int = Field(
        _DEFAULT.max_heavy_per_node, ge=1, description="memory- or bandwidth-heavy tasks one node may hold at once"
    )


class BackfillSection(BaseModel):
    """EASY reservation and backfill."""

    model_config = _SECTION

    enabled: bool = Field(_DEFAULT.backfill, description="reserve GPUs for the first task that cannot start; backfill around it")
    fill_reservations: bool = Field(
        _DEFAULT.fill_reservations,
        description="opportunistic work that checkpoints may use GPUs a reservation waits for, and yields them when it is due",
    )
    holder_reclaims_within_headroom: bool = Field(
        _DEFAULT.holder_reclaims_within_headroom,
        description="a standard task holding the reservation preempts the work filling it only if the headroom would"
        " then let it start (else it would preempt them, stay refused, and preempt them again once they refill)",
    )


class PreemptionSection(BaseModel):
    """When core work may take GPUs from opportunistic work (after a checkpoint)."""

    model_config = _SECTION

    enabled: bool = Field(_DEFAULT.preemption, description="opportunistic work yields to core work")
    after_s: float = Field(
        _DEFAULT.preempt_after_s, ge=0, description="grace: a core task preempts only after waiting this many seconds"
    )
    max_lost_gpu_hours: float | None = Field(
        _DEFAULT.preempt_max_lost_gpu_hours, ge=0,
        description="loss cap: never preempt a lease that would lose more GPU-hours of work than this"
        " (null: at most the victim's own checkpoint write, gpus x 60 s)",
    )


class QuotaSection(BaseModel):
    """How quota validity dates gate a start."""

    model_config = _SECTION

    expiry_gate: bool = Field(_DEFAULT.quota_expiry_gate, description="hold a task whose quota expires before it would end")
    expiry_margin_s: float = Field(
        _DEFAULT.quota_expiry_margin_s, ge=0, description="seconds the quota must outlast the task's estimated end"
    )


class RoundsSection(BaseModel):
    """Accounting rounds (the ledger): how long a round runs before it closes by itself."""

    model_config = _SECTION

    period_days: float = Field(7.0, gt=0, le=366, description="a round closes by itself at the end of each period"
                               " (whole multiples from Monday 1970-01-05 00:00 UTC: 7 = weekly, on Mondays)")


class PolicyDocument(BaseModel):
    """`policy.yaml`: the scheduling policy in force. Every section and field has a default."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, title="cardflow policy document")

    queue: QueueSection = Field(default_factory=QueueSection)
    headroom: HeadroomSection = Field(default_factory=HeadroomSection)
    placement: PlacementSection = Field(default_factory=PlacementSection)
    backfill: BackfillSection = Field(default_factory=BackfillSection)
    preemption: PreemptionSection = Field(default_factory=PreemptionSection)
    quota: QuotaSection = Field(default_factory=QuotaSection)
    rounds: RoundsSection = Field(default_factory=RoundsSection)
    limits: SubmissionLimits = Field(
        default_factory=SubmissionLimits, description="bounds every submission must stay within, checked at intake"
    )
    # governance (shared/config/governance.py): not scheduling knobs of `Policy`, read by the
    # dispatcher, the ledger's alerter and the console from the same document
    approvals: ApprovalsSection = Field(default_factory=ApprovalsSection)
    reviewers: ReviewersSection = Field(default_factory=ReviewersSection)
    deadlines: DeadlinesSection = Field(default_factory=DeadlinesSection)
    idle_reclaim: IdleReclaimSection = Field(default_factory=IdleReclaimSection)
    alerts: AlertsSection = Field(default_factory=AlertsSection)
    reports: ReportLimits = Field(
        default_factory=ReportLimits, description="per-lease caps on agents' report rates, applied by the dispatcher"
    )


class HeadroomShares(Mapping[str, float]):
    """Per-card-type headroom shares with a default for card types not named.

    `Policy.headroom` takes a share or a mapping read with `.get(card_type, 0.0)`; this mapping
    answers `default` for every card type it does not name, so "0.1 everywhere, 0.25 on H100" is
    one value. Immutable and hashable like the `Policy` that holds it.
    """

    __slots__ = ("_default", "_shares")

    def __init__(self, default: float, shares: Mapping[str, float]) -> None:
        self._default = float(default)
        self._shares = dict(sorted((card, float(share)) for card, share in shares.items()))

    @property
    def default(self) -> float:
        return self._default

    def __getitem__(self, card_type: str) -> float:
        return self._shares.get(card_type, self._default)

    def get(self, card_type: str, default: Any = None) -> float:  # noqa: ARG002 - the policy's default wins
        return self[card_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._shares)

    def __len__(self) -> int:
        return len(self._shares)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HeadroomShares) and (self._default, self._shares) == (other._default, other._shares)

    def __hash__(self) -> int:
        return hash((self._default, tuple(self._shares.items())))

    def __repr__(self) -> str:
        return f"HeadroomShares(default={self._default}, shares={self._shares})"


def scheduling_policy(document: PolicyDocument, name: str = "cardflow") -> Policy:
    """The `Policy` that `plan()` takes, from the document in force (`name` labels it in reports)."""
    headroom = document.headroom
    shares: float | HeadroomShares = (
        HeadroomShares(headroom.default, headroom.per_card_type) if headroom.per_card_type else headroom.default
    )
    return Policy(
        name=name,
        order=document.queue.order.value,
        aging_per_hour=document.queue.aging_per_hour,
        headroom=shares,
        headroom_tracks_core=headroom.tracks_core,
        checkpointing_standard_borrows=headroom.checkpointing_standard_borrows,
        fillers_yield_at_once=headroom.fillers_yield_at_once,
        fillers_after_opportunistic=headroom.fillers_after_opportunistic,
        max_heavy_per_node=document.placement.max_heavy_per_node,
        quota_expiry_margin_s=document.quota.expiry_margin_s,
        backfill=document.backfill.enabled,
        head_of_line_blocking=document.queue.head_of_line_blocking,
        readiness_gate=document.queue.readiness_gate,
        preemption=document.preemption.enabled,
        preempt_after_s=document.preemption.after_s,
        preempt_max_lost_gpu_hours=document.preemption.max_lost_gpu_hours,
        quota_expiry_gate=document.quota.expiry_gate,
        fill_reservations=document.backfill.fill_reservations,
        holder_reclaims_within_headroom=document.backfill.holder_reclaims_within_headroom,
    )


def policy_document(policy: Policy) -> PolicyDocument:
    """The document that says exactly `policy` (used to seed version 1 from what is in force)."""
    return PolicyDocument(
        queue=QueueSection(
            order=QueueOrder(policy.order), aging_per_hour=policy.aging_per_hour,
            readiness_gate=policy.readiness_gate, head_of_line_blocking=policy.head_of_line_blocking,
        ),
        headroom=_headroom_section(policy),
        placement=PlacementSection(max_heavy_per_node=policy.max_heavy_per_node),
        backfill=BackfillSection(enabled=policy.backfill, fill_reservations=policy.fill_reservations,
                                 holder_reclaims_within_headroom=policy.holder_reclaims_within_headroom),
        preemption=PreemptionSection(
            enabled=policy.preemption, after_s=policy.preempt_after_s,
            max_lost_gpu_hours=policy.preempt_max_lost_gpu_hours,
        ),
        quota=QuotaSection(expiry_gate=policy.quota_expiry_gate, expiry_margin_s=policy.quota_expiry_margin_s),
    )  # fmt: skip


def _headroom_section(policy: Policy) -> HeadroomSection:
    rules = dict(
        tracks_core=policy.headroom_tracks_core, checkpointing_standard_borrows=policy.checkpointing_standard_borrows,
        fillers_yield_at_once=policy.fillers_yield_at_once, fillers_after_opportunistic=policy.fillers_after_opportunistic,
    )
    headroom = policy.headroom
    if isinstance(headroom, HeadroomShares):
        return HeadroomSection(default=headroom.default, per_card_type=dict(headroom.items()), **rules)
    if isinstance(headroom, Mapping):
        return HeadroomSection(default=0.0, per_card_type=dict(headroom), **rules)
    return HeadroomSection(default=float(headroom), **rules)