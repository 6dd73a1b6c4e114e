"""The status-file convention between a real task and its agent.

A task MAY write a small JSON object to `$CARDFLOW_STATUS_FILE` (= `$CARDFLOW_CHECKPOINT_DIR/
cardflow-status.json`), replacing it atomically (write a temporary file, then rename). The agent
reads it about once a second and once more after the process exits. Every field is optional:

    {"progress": 0.42,            # share of the whole task done, 0..1
     "output_units": 12800,       # cumulative output of this run (samples, tokens, ...)
     "checkpoint": "s3://bucket/run7/step-4000",   # latest COMPLETE checkpoint (any string)
     "checksum": "sha256:...",    # of that checkpoint, if known
     "message": "epoch 3/10",     # free text, sent with progress reports
     "util_pct": 93.0}            # GPU utilisation, only used when the agent cannot measure it

A new `checkpoint` value is reported as `TaskCheckpointed` (and becomes the task's resume point);
new `progress`/`output_units` values as `TaskProgress`. Unknown fields are ignored; an unreadable or
half-written file is skipped until the next read.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

STATUS_FILE_NAME = "cardflow-status.json"


class TaskStatus(BaseModel):
    """What a task says about itself (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    progress: float | None = Field(None, ge=0.0, le=1.0)
    output_units: float | None = Field(None, ge=0.0)
    checkpoint: str | None = Field(None, min_length=1, max_length=2000)
    checksum: str | None = Field(None, max_length=200)
    message: str = Field("", max_length=2000)
    util_pct: float | None = Field(None, ge=0.0, le=100.0)


def read_status(path: Path) -> TaskStatus | None:
    """The task's current status, or None if there is no (valid) status file."""
    try:
        return TaskStatus.model_validate(json.loads(path.read_bytes()))
    except (OSError, ValueError, ValidationError):
        return None


def new_checkpoint(previous: TaskStatus | None, current: TaskStatus | None) -> str | None:
    """The checkpoint to report, if the status names one not reported before."""
    if current is None or current.checkpoint is None:
        return None
    if previous is not None and previous.checkpoint == current.checkpoint:
        return None
    return current.checkpoint


def progress_changed(previous: TaskStatus | None, current: TaskStatus | None) -> bool:
    """True if the status moved progress or output since the last report."""
    if current is None or (current.progress is None and current.output_units is None):
        return False
    if previous is None:
        return True
    return (current.progress, current.output_units) != (previous.progress, previous.output_units)
