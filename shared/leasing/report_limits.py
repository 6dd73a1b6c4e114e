"""How often an agent may report about one lease, and what a report may claim: the policy's `reports` section.

    rules = replace(rules, reports=document.reports)   # the dispatcher, from the policy in force
    screen_claim(claim, report, lease, node, now, rules)   # `screening.rate_cap` applies it

Gaps are in the AGENT's time: a simulated agent registers its time scale (`report.registered`
`time_scale`; x600 runs an hour in 6 s), so a real gap of `g` seconds on a node of scale `s` counts
as `g * s`. Real agents register scale 1. A gap of 0 turns a cap off. The cap is a GCRA (a leaky
bucket with one timestamp per lease and kind): reports may come `burst` early, then one per gap.

What a report may claim (`shared.leasing.plausibility`, also in the agent's time): a success after
less than `min_success_share` of the task's estimated runtime on its card is flagged
(`implausibly_early_success`), and output beyond `max_output_units_per_gpu_hour` (per GPU-hour of
the run, or of its estimate when the run was shorter) is refused (`output_out_of_bounds`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_OUTPUT_RATE = 1e15
OutputRate = Annotated[float, Field(ge=0, le=MAX_OUTPUT_RATE)]


class ReportLimits(BaseModel):
    """Per-lease caps on report rates; a report inside a cap is refused (`rate_limited`) and recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min_checkpoint_gap_s: float = Field(
        30.0, ge=0, le=86_400,
        description="agent-time seconds between two accepted checkpoints of one lease (intake's minimum"
        " checkpoint interval is 60 s, so an honest agent never meets this cap); 0: no cap",
    )  # fmt: skip
    min_progress_gap_s: float = Field(
        5.0, ge=0, le=86_400,
        description="agent-time seconds between two accepted progress reports of one lease; 0: no cap",
    )  # fmt: skip
    burst: int = Field(
        3, ge=0, le=1_000,
        description="reports of one kind a lease may send sooner than the gap before the cap refuses (honest"
        " reports bunched by a busy dispatcher or network pass; a storm is refused after them)",
    )  # fmt: skip
    min_success_share: float = Field(
        0.05, ge=0, le=1,
        description="a success reported before this share of the task's estimated runtime on its card (agent time)"
        " is accepted but flagged implausibly_early_success and raises an alert; its output is not counted; 0: off",
    )  # fmt: skip
    max_output_units_per_gpu_hour: float = Field(
        1e8, ge=0, le=MAX_OUTPUT_RATE,
        description="output units a run may claim per GPU-hour it ran (agent time; at least its estimate's"
        " GPU-hours); a claim beyond is refused output_out_of_bounds (a success is kept, flagged); 0: no bound",
    )  # fmt: skip
    max_output_units_per_gpu_hour_by_unit: dict[str, OutputRate] = Field(
        default_factory=lambda: {"tokens": 1e9},
        description="the bound for tasks whose output_unit is named here, instead of the default (tokens: 1e9 per"
        " GPU-hour, about 280,000 a second, above any GPU's real generation rate)",
    )  # fmt: skip

    def output_rate_for(self, unit: str | None) -> float:
        """Output units per GPU-hour a task counting `unit` may claim (0: no bound)."""
        return self.max_output_units_per_gpu_hour_by_unit.get(unit or "", self.max_output_units_per_gpu_hour)
