"""Is what an agent says about its run believable? Pure rules over the lease, its task and its node.

A report that passed fencing carries a valid token, but the token proves only WHICH run it is
about, not that the run did what it says (issue 15: "succeeded, output 1e9" with a valid token for
a task that had run 20 s of 2 hours). Two rules of the policy's `reports` section
(`ReportLimits`), both in the AGENT's time (real seconds x the node's registered time scale, so a
simulated x600 agent that runs a 2-hour task in 12 s ran it for 2 hours):

- `early_success`: a success after less than `min_success_share` of the task's estimated runtime on
  the lease's card type is accepted (the task ends succeeded: refusing it would run the task again
  on the word of the same agent) but FLAGGED `implausibly_early_success`, with a sentence saying by
  how much. A run resumed from a checkpoint is not judged: earlier runs did part of the work, and
  the dispatcher does not keep their times;
- `refused_output`: a run may claim at most `max_output_units_per_gpu_hour` (per output unit:
  `..._by_unit`) for each GPU-hour it ran — counted as at least the GPU-hours of its estimate, so
  an early claim is judged against the run it was planned to be. A progress report beyond that
  is applied without its output (the claim is refused `output_out_of_bounds` and counted, like a
  rate-limited report); a success beyond it ends the task succeeded, flagged
  `output_out_of_bounds`, with NO output (`task.succeeded.output_units` is empty and
  `claimed_output_units` says what was claimed), so the ledger never counts it.

`judge_success` applies both to a clean `report.finished` and returns the outcome as recorded.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from shared.events.reasons import SuccessFlag
from shared.leasing.fencing import Refusal, Rejection
from shared.leasing.records import LeaseRecord, NodeRecord, TaskRecord
from shared.leasing.report_limits import ReportLimits
from shared.leasing.run_outcome import RunOutcome, run_end
from shared.scheduling.reasons import format_duration


def agent_seconds(lease: LeaseRecord, node: NodeRecord | None, until: datetime) -> float:
    """Seconds of the agent's time from the lease's grant to `until` (real seconds x its time scale)."""
    return max(0.0, (until - lease.granted_at).total_seconds()) * _scale(node)


def estimated_runtime_s(lease: LeaseRecord, task: TaskRecord | None) -> float:
    """The task's estimated runtime on the lease's card type (the matcher's option; else the lease's plan)."""
    for option in task.options if task is not None else ():
        if option.card_type == lease.card_type:
            return option.runtime_s
    return max(0.0, (lease.estimated_end - lease.granted_at).total_seconds())


def early_success(lease: LeaseRecord, task: TaskRecord | None, node: NodeRecord | None, ended_at: datetime,
                  limits: ReportLimits) -> str | None:
    """A sentence if a success ending at `ended_at` came before the policy's share of the estimate; else None."""
    estimate = estimated_runtime_s(lease, task)
    if limits.min_success_share <= 0 or lease.resume_from is not None or estimate <= 0:
        return None
    ran = agent_seconds(lease, node, ended_at)
    if ran >= limits.min_success_share * estimate:
        return None
    return (f"lease {lease.lease_id} reported success after {format_duration(ran)} of its agent's time"
            f"{_scaled(node)}, {ran / estimate:.1%} of the task's estimated {format_duration(estimate)} on"
            f" {lease.card_type} (the policy's reports.min_success_share is {limits.min_success_share:.0%})")


def output_bound(lease: LeaseRecord, task: TaskRecord | None, node: NodeRecord | None, until: datetime,
                 limits: ReportLimits) -> tuple[float, float, float] | None:
    """(bound, rate, GPU-hours) the run may claim output for up to `until`; None when the policy sets no bound."""
    rate = limits.output_rate_for(task.output_unit if task is not None else None)
    if rate <= 0:
        return None
    hours = max(agent_seconds(lease, node, until), estimated_runtime_s(lease, task)) / 3600.0
    gpu_hours = hours * max(1, len(lease.gpu_indices))
    return rate * gpu_hours, rate, gpu_hours


def refused_output(claimed: float | None, lease: LeaseRecord, task: TaskRecord | None, node: NodeRecord | None,
                   until: datetime, limits: ReportLimits) -> Refusal | None:
    """An `output_out_of_bounds` refusal if `claimed` exceeds the run's bound; else None."""
    bound = output_bound(lease, task, node, until, limits)
    if claimed is None or bound is None or claimed <= bound[0]:
        return None
    limit, rate, gpu_hours = bound
    unit = f" {task.output_unit}" if task is not None and task.output_unit else ""
    return Refusal(Rejection.OUTPUT_OUT_OF_BOUNDS,
                   f"lease {lease.lease_id} claimed {claimed:g}{unit} of output; the policy allows {rate:g} per"
                   f" GPU-hour (reports.max_output_units_per_gpu_hour), {limit:g} for its {gpu_hours:.3g} GPU-hours"
                   f"{_scaled(node)}: the claim is not recorded")


def judge_success(lease: LeaseRecord, task: TaskRecord | None, node: NodeRecord | None, outcome: RunOutcome,
                  now: datetime, limits: ReportLimits) -> RunOutcome:
    """The outcome of a clean finish as recorded: flags with their sentences, output beyond the bound refused."""
    ended = run_end(lease, outcome, now)
    flags: list[SuccessFlag] = []
    details: list[str] = []
    early = early_success(lease, task, node, ended, limits)
    if early is not None:
        flags.append(SuccessFlag.IMPLAUSIBLY_EARLY_SUCCESS)
        details.append(early)
    refusal = refused_output(outcome.output_units, lease, task, node, ended, limits)
    if refusal is not None:
        flags.append(SuccessFlag.OUTPUT_OUT_OF_BOUNDS)
        details.append(refusal.detail)
        outcome = replace(outcome, output_units=None, claimed_output_units=outcome.output_units)
    return replace(outcome, flags=tuple(flags), flag_detail="; ".join(details))


def _scale(node: NodeRecord | None) -> float:
    return node.time_scale if node is not None else 1.0


def _scaled(node: NodeRecord | None) -> str:
    return f" (x{_scale(node):g})" if _scale(node) != 1 else ""
