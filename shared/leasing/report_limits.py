"""How often an agent may report about one lease: the policy document's `reports` section.

    rules = replace(rules, reports=document.reports)   # the dispatcher, from the policy in force
    screen_claim(claim, report, lease, node, now, rules)   # `screening.rate_cap` applies it

Gaps are in the AGENT's time: a simulated agent registers its time scale (`report.registered`
`time_scale`; x600 runs an hour in 6 s), so a real gap of `g` seconds on a node of scale `s` counts
as `g * s`. Real agents register scale 1. A gap of 0 turns a cap off. The cap is a GCRA (a leaky
bucket with one timestamp per lease and kind): reports may come `burst` early, then one per gap.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
