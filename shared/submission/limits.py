"""The bounds every submission must stay within, so no valid task can overflow, stall or starve.

Two kinds of bound:

- fixed bounds in the model itself (`model.py`: text lengths, list sizes, hard caps that keep
  every number inside what PostgreSQL's `integer`, Python's `datetime` and the card model can
  hold) — they hold for every submission and every `task.submitted` event ever parsed;
- site limits, `SubmissionLimits`, checked when a submission is validated at intake
  (`validate_submission(raw, limits=...)`); a site may lower or raise them. They are not
  checked when an event is parsed, so a site that tightens its limits can still replay history.

The site limits are the `limits` section of the policy document (`shared.config.PolicyDocument`):
intake checks each batch against the version in force (`services.config.limits.load_submission_limits`),
so `cardflow config set policy limits.max_gpus_per_task=64 --reason ...` applies to the next
submission. The defaults suit a site whose largest task spans 1,024 GPUs. `CARDFLOW_MAX_GPUS_PER_TASK`
still overrides the document's `max_gpus_per_task` where it is set (tests, one-off runs).
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

HARD_MAX_GPUS = 1_000_000
HARD_MAX_ESTIMATE_GPU_HOURS = 1e9
HARD_MAX_VRAM_GB = 100_000.0
MAX_DEPTH = 16
"""Levels of nesting a submission may have (the deepest valid one has 3: inputs[0].dataset)."""

MAX_SUBMISSION_BYTES = 1_000_000
"""Size of a submission's JSON text (HTTP body or `cf:ingest` payload)."""

MAX_GPUS_ENV = "CARDFLOW_MAX_GPUS_PER_TASK"


class SubmissionLimits(BaseModel):
    """Site limits on a submission (see the module docstring); the policy's `limits` section."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_gpus_per_task: int = Field(1024, ge=1, le=HARD_MAX_GPUS, description="the most GPUs one task may ask for")
    max_estimate_gpu_hours: float = Field(
        10_000_000.0, gt=0, le=HARD_MAX_ESTIMATE_GPU_HOURS, description="the largest estimate a task may state"
    )
    max_runtime_hours: float = Field(
        24 * 366.0, gt=0, description="the longest run a task may state: estimate_gpu_hours / gpus on the reference card"
    )
    min_checkpoint_interval_minutes: float = Field(
        1.0, ge=1.0, description="the shortest checkpoint interval; a task checkpointing more often floods cf:reports"
    )


def site_limits(limits: SubmissionLimits | None = None) -> SubmissionLimits:
    """`limits` (default: the defaults), with `CARDFLOW_MAX_GPUS_PER_TASK` over them when it is set."""
    limits = limits or DEFAULT_LIMITS
    override = os.environ.get(MAX_GPUS_ENV)
    if not override:
        return limits
    return SubmissionLimits.model_validate(limits.model_dump() | {"max_gpus_per_task": int(override)})


DEFAULT_LIMITS = SubmissionLimits()
