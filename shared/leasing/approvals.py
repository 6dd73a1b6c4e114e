"""Approvals: which tasks need a reviewer before they may start, and what a review does (pure).

- `approval_needed(task, rules)`: the policy's rules (`approvals.rules`) a queued task matches — on
  the matcher's chosen card type (the task's first option): estimated cost above X, estimated
  GPU-hours above Y, a class, a project, a card type. Any match means approval is needed.
- `gate_queue(queue, approved, rules)`: the cycle's queue with `approved=False` for every task that
  needs approval and has none, so `plan()` defers it `not_approved` before its quota is looked at:
  it holds no GPU and no quota while it waits (`waiting.update_waiting` holds it, `task.held`).
- `explain_approvals(plan, ...)`: those deferrals name the rules and who may approve.
- `apply_review(work, task, review)`: a reviewer's `task.reviewed` — approve: the task keeps
  `approved_by` and `task.approved` (actor: the reviewer) says so; deny: `task.denied` and the task is
  cancelled. Nobody may review their own task, and only a waiting task is reviewed (a refusal is
  returned as a sentence for the log).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from shared.config.governance import ApprovalRule, ReviewersSection
from shared.events import TaskApproved, TaskCancelled, TaskDenied, TaskReviewed
from shared.events.intake import ReviewDecision
from shared.events.states import TaskState
from shared.events.subjects import task_subject
from shared.leasing.records import WAITING_STATES, TaskRecord
from shared.leasing.work import LeaseWork
from shared.scheduling.model import DeferralReason, Deferrals, Plan, QueuedTask


def approval_needed(task: QueuedTask, rules: Sequence[ApprovalRule]) -> tuple[ApprovalRule, ...]:
    """The rules the task matches (none: it needs no approval). An unmatched task matches none yet."""
    if not task.options:
        return ()
    chosen = task.options[0]
    gpu_hours = task.gpus * chosen.runtime_s / 3600.0
    return tuple(rule for rule in rules if _matches(rule, task, chosen.card_type, chosen.cost, gpu_hours))


def _matches(rule: ApprovalRule, task: QueuedTask, card_type: str, cost: float, gpu_hours: float) -> bool:
    return (
        (rule.cost_above is None or cost > rule.cost_above)
        and (rule.gpu_hours_above is None or gpu_hours > rule.gpu_hours_above)
        and (rule.priority_class is None or task.priority_class == rule.priority_class)
        and (not rule.projects or task.project in rule.projects)
        and (not rule.card_types or card_type in rule.card_types)
    )


def gate_queue(queue: list[QueuedTask], approved: AbstractSet[str], rules: Sequence[ApprovalRule]) -> list[QueuedTask]:
    """The queue with every task that needs approval and has none marked unapproved."""
    if not rules:
        return queue
    return [replace(task, approved=False) if task.task_id not in approved and approval_needed(task, rules) else task
            for task in queue]


def approval_sentence(task: QueuedTask, rules: Sequence[ApprovalRule], reviewers: Sequence[str]) -> str:
    """Why a task waits for approval and who may give it."""
    chosen = task.options[0]
    why = "; ".join(_rule_text(rule, task, chosen.cost, task.gpus * chosen.runtime_s / 3600.0) for rule in rules)
    who = ", ".join(reviewers) if reviewers else "any reviewer"
    return f"it waits for approval ({why}); who may approve: {who} (not its submitter)"


def _rule_text(rule: ApprovalRule, task: QueuedTask, cost: float, gpu_hours: float) -> str:
    parts = []
    if rule.cost_above is not None:
        parts.append(f"estimated cost {cost:,.2f} > {rule.cost_above:,.2f}")
    if rule.gpu_hours_above is not None:
        parts.append(f"{gpu_hours:,.1f} GPU-hours > {rule.gpu_hours_above:,.1f}")
    if rule.priority_class is not None:
        parts.append(f"class {task.priority_class}")
    if rule.projects:
        parts.append(f"project {task.project}")
    if rule.card_types:
        parts.append(f"card type {task.options[0].card_type}")
    return f"rule {rule.name}: {', '.join(parts)}"


def explain_approvals(decided: Plan, queue: Sequence[QueuedTask], rules: Sequence[ApprovalRule],
                      reviewers: ReviewersSection) -> Plan:
    """`decided` with each `not_approved` deferral's sentence naming the rules and the reviewers."""
    if not rules:
        return decided
    by_id = {task.task_id: task for task in queue}
    deferrals = decided.deferrals
    details = tuple(
        approval_sentence(task, approval_needed(task, rules), reviewers.of(task.project))
        if reason is DeferralReason.NOT_APPROVED and (task := by_id.get(task_id)) is not None and task.options
        else detail
        for task_id, reason, detail in zip(deferrals.task_ids, deferrals.reasons, deferrals.details)
    )
    return replace(decided, deferrals=Deferrals(deferrals.task_ids, deferrals.reasons, details))


def apply_review(work: LeaseWork, task: TaskRecord, review: TaskReviewed) -> str | None:
    """Carry out a review (see the module docstring); a sentence when it is refused."""
    reviewer, reason = review.actor, review.data.reason
    if task.submitted_by is not None and reviewer == task.submitted_by:
        return f"{reviewer} may not review task {task.task_id}: they submitted it"
    if task.state not in WAITING_STATES or task.cancel_requested:
        return f"task {task.task_id} is {task.state}: only a waiting task is reviewed"
    subject = task_subject(task.task_id)
    if review.data.decision is ReviewDecision.APPROVE:
        if task.approved_by is None:
            work.put(replace(task, approved_by=reviewer, updated_at=work.now))
            work.emit(TaskApproved, subject, {"task_id": task.task_id, "note": reason}, cause=review)
        return None
    if task.deferral_reason is not DeferralReason.NOT_APPROVED:
        return f"task {task.task_id} does not wait for approval ({task.deferral_reason or task.state}): it cannot be denied"
    work.put(replace(task, state=TaskState.CANCELLED, cancel_reason=f"denied by {reviewer}: {reason}",
                     updated_at=work.now))
    work.emit(TaskDenied, subject, {"task_id": task.task_id, "reason": reason}, cause=review)
    work.emit(TaskCancelled, subject, {"task_id": task.task_id, "reason": f"denied by {reviewer}: {reason}"[:2000]},
              cause=review)
    return None
