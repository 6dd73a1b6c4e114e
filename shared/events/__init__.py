"""Event contracts of cardflow: the envelope, every event type, parsing, upcasting, task states.

    from shared.events import LeaseGranted, make_event, parse_event, canonical_json

    event = make_event(LeaseGranted, subject=lease_subject("L9"), subject_seq=1,
                       producer="dispatcher/local-1", actor="service:dispatcher", data={...})
    same = parse_event(canonical_json(event))  # == event

Agent reports and dispatcher commands share the envelope but are not events: their classes live
in `shared.events.reports` (some names, e.g. `TaskCheckpointed`, match event classes; import them
from there), parsed by `parse_report` / `parse_command`.
"""

from shared.events.catalog import (
    COMMAND_TYPES,
    EVENT_ADAPTER,
    EVENT_CLASSES,
    EVENT_TYPES,
    MESSAGE_TYPES,
    REPORT_TYPES,
    Event,
    caused_by,
    current_schema_version,
    event_class,
    make_event,
)
from shared.events.config import ConfigChanged, ConfigChangedData, TemplateChanged, TemplateChangedData
from shared.events.dispatch import (
    TaskApprovalDelayed,
    TaskApprovalDelayedData,
    TaskApproved,
    TaskApprovedData,
    TaskCancelled,
    TaskCancelledData,
    TaskCheckpointed,
    TaskCheckpointedData,
    TaskDeadlineEndangered,
    TaskDeadlineEndangeredData,
    TaskDenied,
    TaskDeniedData,
    TaskFailed,
    TaskFailedData,
    TaskHeld,
    TaskHeldData,
    TaskQueued,
    TaskQueuedData,
    TaskQuotaEndangered,
    TaskQuotaEndangeredData,
    TaskRequeued,
    TaskRequeuedData,
    TaskStarted,
    TaskStartedData,
    TaskSucceeded,
    TaskSucceededData,
)
from shared.events.envelope import Envelope, Payload, canonical_json, new_event_id, utcnow
from shared.events.identity import (
    AgentEnrolled,
    AgentEnrolledData,
    AgentUnenrolled,
    AgentUnenrolledData,
    TokenCreated,
    TokenCreatedData,
    TokenRevoked,
    TokenRevokedData,
)
from shared.events.intake import (
    DataReadySignalled,
    DataReadySignalledData,
    RejectionReason,
    ReviewDecision,
    TaskCancelRequested,
    TaskCancelRequestedData,
    TaskFlagCleared,
    TaskFlagClearedData,
    TaskRejected,
    TaskRejectedData,
    TaskReviewed,
    TaskReviewedData,
    TaskSubmitted,
    TaskSubmittedData,
)
from shared.events.leases import (
    LeaseExpired,
    LeaseExpiredData,
    LeaseGranted,
    LeaseGrantedData,
    LeaseReleased,
    LeaseReleasedData,
    LeaseRenewed,
    LeaseRenewedData,
    LeaseRevoked,
    LeaseRevokedData,
    NodeLost,
    NodeLostData,
    NodeRegistered,
    NodeRegisteredData,
)
from shared.events.ledger import (
    LeaseUsageSlice,
    QuotaAdjusted,
    QuotaAdjustedData,
    QuotaExpiring,
    QuotaExpiringData,
    QuotaGranted,
    QuotaGrantedData,
    QuotaThresholdCrossed,
    QuotaThresholdCrossedData,
    RoundClosed,
    RoundClosedData,
    RoundNoteAmended,
    RoundNoteAmendedData,
    UsageBatchRecorded,
    UsageBatchRecordedData,
    UsageRecorded,
    UsageRecordedData,
)
from shared.events.matching import (
    CardEstimate,
    TaskMatched,
    TaskMatchedData,
    TaskReadinessChanged,
    TaskReadinessChangedData,
    TaskUnmatchable,
    TaskUnmatchableData,
)
from shared.events.emission import Emission
from shared.events.operator import (
    NodeDrained,
    NodeDrainRequested,
    NodeUndrained,
    NodeUndrainRequested,
    TaskHoldRequested,
    TaskPriorityChanged,
    TaskPriorityChangeRequested,
    TaskReleased,
    TaskReleaseRequested,
    TaskRequeueRequested,
)
from shared.events.parsing import EventParseError, parse_command, parse_event, parse_report
from shared.events.reports import AgentCommand, AgentReport
from shared.events.reasons import (
    NodeMode,
    ReleaseReason,
    RequeueReason,
    RevokeReason,
    StartReason,
    UnmatchableReason,
)
from shared.events.states import TERMINAL_STATES, TaskState
from shared.events.upcasting import UPCASTERS, UpcastError, UpcasterRegistry, upcaster

import types as _types

__all__ = [name for name, value in globals().items() if not name.startswith("_") and not isinstance(value, _types.ModuleType)]
