"""Events of operators' dead-letter actions: an entry replayed onto its stream, an entry purged.

The console's API emits them (through intake's outbox, the command gateway) with the operator's
token as actor and the reason they gave; the Redis change and the event commit together or the
action is refused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.events.envelope import Envelope, Payload
from shared.events.values import Detail


class DeadLetterReplayedData(Payload):
    deadletter_id: str = Field(description="the entry's id in cf:deadletter (removed from it)")
    stream: str = Field(description="the stream the original entry came from, and is appended to again")
    entry_id: str = Field(description="the original entry's id in that stream")
    replayed_as: str = Field(description="the id of the re-appended entry")
    reason: Detail = Field(description="why the operator replayed it")


class DeadLetterReplayed(Envelope):
    """An operator put a dead entry back on its stream; every group of that stream reads it again."""

    type: Literal["deadletter.replayed"] = "deadletter.replayed"
    data: DeadLetterReplayedData


class DeadLetterPurgedData(Payload):
    deadletter_id: str = Field(description="the entry's id in cf:deadletter (deleted)")
    stream: str = Field(description="the stream the original entry came from")
    entry_id: str = Field(description="the original entry's id in that stream")
    dead_reason: str = Field(description="why it had been dead-lettered: invalid, failed or exhausted")
    reason: Detail = Field(description="why the operator purged it")


class DeadLetterPurged(Envelope):
    """An operator deleted a dead entry for good."""

    type: Literal["deadletter.purged"] = "deadletter.purged"
    data: DeadLetterPurgedData
