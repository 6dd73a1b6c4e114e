"""The cycle's governance steps: the pure rules of `shared.leasing` with the policy document in force.

- `gate`: before `plan()`, tasks that need a reviewer are marked unapproved (`approvals.gate_queue`),
  and, if the policy holds them, tasks that cannot meet their deadline leave the queue
  (`watch.deadline_gate`);
- `govern`: after `plan()`, approval deferrals name their rules and reviewers, and the deadline
  holds join the plan's deferrals (so `apply_plan` holds them like any other);
- `watch_queue`: every `estimate_every_s`, the queue's estimated starts (`shared.scheduling.estimate`)
  and the watches over them (`watch.watch`: deadlines at risk, core work near its quota's expiry,
  approvals waiting too long).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from services.dispatcher.context import Dispatcher
from services.dispatcher.working_set import WorkingSet
from shared.leasing.approvals import explain_approvals, gate_queue
from shared.leasing.records import LeaseBook
from shared.leasing.watch import STARTED, WatchRules, deadline_gate, watch, watch_started
from shared.leasing.work import BookChanges, LeaseWork
from shared.scheduling.estimate import StartEstimate, estimate_starts
from shared.scheduling.model import Deferral, Plan, QueuedTask, Snapshot


def gate(dc: Dispatcher, state: WorkingSet, queue: Sequence[QueuedTask], now: float) -> tuple[Sequence[QueuedTask], list[Deferral]]:
    """The queue `plan()` gets, and the deadline holds kept out of it."""
    queue = gate_queue(queue, state.approved, dc.governance.approvals.rules)
    return deadline_gate(queue, now, dc.governance.deadlines.hold_unreachable)


def govern(dc: Dispatcher, decided: Plan, queue: Sequence[QueuedTask], held: Sequence[Deferral]) -> Plan:
    """The plan with approval sentences and the deadline holds."""
    decided = explain_approvals(decided, queue, dc.governance.approvals.rules, dc.governance.reviewers)
    return replace(decided, deferrals=decided.deferrals.extended(held)) if held else decided


def watch_rules(dc: Dispatcher) -> WatchRules:
    document = dc.governance
    return WatchRules(approval_alert_after_s=document.approvals.alert_after_hours * 3600.0,
                      reminder_days=document.alerts.reminder_days,
                      hold_unreachable=document.deadlines.hold_unreachable,
                      quota_margin_s=dc.policy.quota_expiry_margin_s)  # fmt: skip


def watch_queue(dc: Dispatcher, book: LeaseBook, snapshot: Snapshot, ordered: Sequence[QueuedTask], decided: Plan,
                now_s: float, step_now) -> tuple[dict[str, StartEstimate], BookChanges]:  # noqa: ANN001
    """The queue's estimated starts, and what the watches raise over them (a pure fold's changes)."""
    estimates = estimate_starts(snapshot, ordered, decided, now_s, dc.config.estimate_limit)
    work = LeaseWork(book, step_now, dc.rules)
    left = {account_id: quota.remaining_gpu_hours for account_id, quota in snapshot.quotas.items()}
    waiting = [book.tasks[task.task_id] for task in ordered if task.task_id in book.tasks]
    watch(work, waiting, estimates, list(book.accounts.values()), left, watch_rules(dc))
    watch_started(work, [task for task in book.tasks.values() if task.deadline is not None and task.state in STARTED])
    return estimates, work.changes()
