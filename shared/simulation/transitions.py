"""State transitions of the simulation: what each event and each grant does to tasks and leases.

Split from `engine.py` (which owns the loop); every handler returns True when the change may
alter the next plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING

from shared.events.states import TaskState
from shared.leasing.lease_end import EndingLease, TaskEffect, Trigger, decide_lease_end
from shared.scheduling.model import Grant, PriorityClass, QueuedTask, QuotaAccount, RunningLease
from shared.scheduling.preemption import PREEMPT_CHECKPOINT_COST_S
from shared.simulation.state import EventKind, LeaseRun, TaskRun

if TYPE_CHECKING:
    from shared.scheduling.policy_knobs import Policy
    from shared.simulation.cardmodel import CardModel
    from shared.simulation.fleet import Fleet
    from shared.simulation.metrics import Recorder

MIN_REMAINING_ESTIMATE_S = 60.0  # a resumed task whose estimate ran out still claims a minute
# A preempted task that checkpoints writes a checkpoint on the PreemptCommand (ARCHITECTURE §5/§7,
# docs/agent.md): it keeps its progress up to the preemption except the write's cost — by default the
# cost the scheduling core assumes when it ranks victims (`shared.scheduling.preemption`).


class LeaseEndCause(StrEnum):
    """How a simulated lease ends, in the live dispatcher's terms (`shared.leasing.lease_end`)."""

    RAN_TO_THE_END = "ran_to_the_end"  # the agent reports exit code 0
    PREEMPTED = "preempted"  # the dispatcher preempted it; the agent checkpointed and yielded
    CUT_OFF = "cut_off"  # killed without warning (its quota ended): no exit code, no request


@cache
def lease_end_effect(cause: LeaseEndCause) -> TaskEffect:
    """What the end of a simulated lease does to its task: the live dispatcher's own rule
    (`decide_lease_end`), so the simulator completes, requeues and cuts off tasks exactly as production."""
    preempted = cause is LeaseEndCause.PREEMPTED
    ending = EndingLease(preempting=preempted, revoke_reason=None, current_run=True, task_state=TaskState.RUNNING,
                         cancel_requested=False, other_parts_active=0)
    exit_code = 0 if cause is LeaseEndCause.RAN_TO_THE_END else None
    return decide_lease_end(ending, Trigger.FINISHED, exit_code, "preempted" if preempted else None).effect


class Transitions:
    """Event handlers and lease bookkeeping; mixed into `Simulation`."""

    policy: Policy
    cards: CardModel
    fleet: Fleet
    recorder: Recorder
    _runs: dict[str, TaskRun]
    _queue: dict[str, QueuedTask]
    _touched: dict[str, QueuedTask | None]  # task id -> as the kept queue holds it (None: not), until `_kept_queue`
    _leases: dict[str, RunningLease]
    _lease_task: dict[str, str]
    _leases_touched: dict[str, bool]  # lease id -> whether the kept snapshot holds it, until `_kept_snapshot`
    _queued_by_class: Counter[PriorityClass]
    _ready_queued: int
    _running_by_class: Counter[PriorityClass]
    _running_borrowing_standard: int  # standard leases that borrow the headroom (`LeaseRun.borrowed_headroom`)
    _quotas: dict[str, QuotaAccount]
    _completed: int
    preempt_checkpoint_cost_s: float = PREEMPT_CHECKPOINT_COST_S

    def _push(self, at: float, kind: EventKind, key: str) -> None:  # provided by Simulation
        raise NotImplementedError

    # --- queue ------------------------------------------------------------------------------
    def _touch(self, task_id: str) -> None:
        """Note, before the queue changes for a task, how the kept queue holds it (`_kept_queue`)."""
        if task_id not in self._touched:
            self._touched[task_id] = self._queue.get(task_id)

    def _enqueue(self, run: TaskRun) -> None:
        run.view = run.queued_view()
        self._touch(run.task.task_id)
        self._queue[run.task.task_id] = run.view
        self._queued_by_class[run.task.priority_class] += 1
        self._ready_queued += int(run.data_ready)

    def _dequeue(self, run: TaskRun) -> None:
        self._touch(run.task.task_id)
        del self._queue[run.task.task_id]
        run.view = None
        self._queued_by_class[run.task.priority_class] -= 1
        self._ready_queued -= int(run.data_ready)

    def _on_arrival(self, task_id: str, now: float) -> bool:
        run = self._runs[task_id]
        run.data_ready = run.task.ready_s <= now
        if not run.data_ready:
            self._push(run.task.ready_s, EventKind.READY, task_id)
        self._enqueue(run)
        return True

    def _on_ready(self, task_id: str, now: float) -> bool:
        run = self._runs[task_id]
        run.data_ready = True
        if run.view is None:  # already running (readiness-blind start): its work begins now
            return False
        run.view = replace(run.view, data_ready=True)
        self._touch(task_id)
        self._queue[task_id] = run.view
        self._ready_queued += 1
        return self.policy.readiness_gate

    def _on_quota_start(self, project: str, now: float) -> bool:
        return True

    # --- leases -----------------------------------------------------------------------------
    def _start(self, grant: Grant, now: float) -> None:
        """Apply a grant: occupy GPUs, open the lease, schedule its finish and checkpoints."""
        run = self._runs[grant.task_id]
        self._dequeue(run)
        run.attempts += 1
        task = run.task
        speed = self.cards.speed(task, grant.card_type)
        work_start = max(now, task.ready_s)
        run.lease = LeaseRun(
            lease_ids=tuple(f"{task.task_id}#{run.attempts}/{i}" for i in range(len(grant.placements))),
            card_type=grant.card_type,
            placements=grant.placements,
            started_s=now,
            work_start_s=work_start,
            end_s=work_start + run.remaining_work_s * speed,
            estimated_end=grant.estimated_end,
            speed=speed,
            charged_gpu_hours=task.gpus * max(0.0, grant.estimated_end - now) / 3600.0,
            borrowed_headroom=grant.borrowed_headroom,
        )
        self.fleet.occupy(grant.placements, task.heavy)
        self._add_lease_views(run)
        self._charge(task.project, run.lease.charged_gpu_hours)
        self._running_by_class[task.priority_class] += 1
        self._running_borrowing_standard += grant.borrowed_headroom
        self._push(run.lease.end_s, EventKind.FINISH, run.lease.lease_ids[0])
        self._schedule_checkpoint(run, work_start)

    def _schedule_checkpoint(self, run: TaskRun, after: float) -> None:
        interval = run.task.checkpoint_interval_s
        lease = run.lease
        if interval and lease is not None and after + interval < lease.end_s:
            self._push(after + interval, EventKind.CHECKPOINT, lease.lease_ids[0])

    def _add_lease_views(self, run: TaskRun) -> None:
        task, lease = run.task, run.lease
        assert lease is not None
        for lease_id, placement in zip(lease.lease_ids, lease.placements):
            self._touch_lease(lease_id)
            self._leases[lease_id] = RunningLease(
                lease_id=lease_id, task_id=task.task_id, project=task.project,
                priority_class=task.priority_class, node_id=placement.node_id, card_type=lease.card_type,
                gpu_indices=placement.gpu_indices, started_at=lease.started_s,
                estimated_end=lease.estimated_end, last_checkpoint_at=lease.last_checkpoint_s, heavy=task.heavy,
                checkpoints_on_preempt=task.checkpoint_interval_s is not None, borrowed_headroom=lease.borrowed_headroom,
                submitted_at=task.submit_s, priority=task.priority,
            )
            self._lease_task[lease_id] = task.task_id

    def _remove_lease_views(self, lease: LeaseRun) -> None:
        for lease_id in lease.lease_ids:
            self._touch_lease(lease_id)
            del self._leases[lease_id]
            del self._lease_task[lease_id]

    def _touch_lease(self, lease_id: str) -> None:
        """Note, before a lease view changes, whether the kept snapshot holds it (`_kept_snapshot`)."""
        if lease_id not in self._leases_touched:
            self._leases_touched[lease_id] = lease_id in self._leases

    def _current(self, lease_id: str) -> TaskRun | None:
        """The task still running under `lease_id` (None if that lease has ended)."""
        task_id = self._lease_task.get(lease_id)
        return self._runs[task_id] if task_id is not None else None

    def _on_checkpoint(self, lease_id: str, now: float) -> bool:
        run = self._current(lease_id)
        if run is None or run.lease is None:
            return False
        run.lease.last_checkpoint_s = now
        for part in run.lease.lease_ids:
            self._touch_lease(part)
            self._leases[part] = replace(self._leases[part], last_checkpoint_at=now)
        self._schedule_checkpoint(run, now)
        return False

    def _on_finish(self, lease_id: str, now: float) -> bool:
        run = self._current(lease_id)
        if run is None:
            return False
        self._end_lease(run, LeaseEndCause.RAN_TO_THE_END, now)
        return True

    def _on_preempt(self, lease_id: str, now: float) -> bool:
        """Stop the task, keep its progress (checkpointed now, if it can), queue the rest again."""
        run = self._current(lease_id)
        if run is None:
            return False
        self._end_lease(run, LeaseEndCause.PREEMPTED, now)
        self.recorder.preemptions += 1
        return True

    def _on_quota_expiry(self, project: str, now: float) -> bool:
        """The project's quota ends: its running tasks are cut off without warning (and not requeued)."""
        victims = [run for run in self._runs.values() if run.lease is not None and run.task.project == project]
        for run in victims:
            self._end_lease(run, LeaseEndCause.CUT_OFF, now)
            self.recorder.quota_cutoffs += 1
        return True

    def _end_lease(self, run: TaskRun, cause: LeaseEndCause, now: float) -> None:
        """End the task's lease and move the task as the live dispatcher would (`lease_end_effect`)."""
        effect = lease_end_effect(cause)
        if effect is TaskEffect.SUCCEED:
            self._close(run, now, kept_until=now)
            run.remaining_work_s = 0.0
            self.recorder.jcts[run.task.task_id] = now - run.task.submit_s
            self.recorder.last_finish = max(now, self.recorder.last_finish or now)
            self._completed += 1
        elif effect is TaskEffect.REQUEUE:
            checkpoints = cause is LeaseEndCause.PREEMPTED and run.task.checkpoint_interval_s is not None
            self._stop_early(run, now, checkpoint_now=checkpoints)
            self._enqueue(run)
        else:  # the task fails: what it did since its last checkpoint is lost, and it is not requeued
            self._stop_early(run, now, checkpoint_now=False)
            run.cut_off = True

    def _stop_early(self, run: TaskRun, now: float, *, checkpoint_now: bool) -> None:
        """Close the lease early; progress is kept up to the last checkpoint, or — `checkpoint_now`, a
        warned task that checkpoints — up to `now` minus the checkpoint write (`preempt_checkpoint_cost_s`)."""
        lease = run.lease
        assert lease is not None
        kept_until = max(lease.last_checkpoint_s or lease.work_start_s, lease.work_start_s)
        if checkpoint_now:
            kept_until = max(kept_until, now - self.preempt_checkpoint_cost_s)
        kept_until = min(now, kept_until)
        progress = max(0.0, kept_until - lease.work_start_s) / lease.speed if lease.speed > 0 else 0.0
        self._close(run, now, kept_until=kept_until)
        run.remaining_work_s = max(0.0, run.remaining_work_s - progress)
        run.remaining_estimate_s = max(MIN_REMAINING_ESTIMATE_S, run.remaining_estimate_s - progress)

    def _close(self, run: TaskRun, now: float, kept_until: float) -> None:
        """End the lease: free GPUs, record idle/useful/lost time, cost, wait; settle the quota."""
        lease, task = run.lease, run.task
        assert lease is not None
        self.fleet.release(lease.placements, task.heavy)
        self._remove_lease_views(lease)
        self._running_by_class[task.priority_class] -= 1
        self._running_borrowing_standard -= lease.borrowed_headroom
        run.lease = None
        recorder, gpus = self.recorder, task.gpus
        work_start = min(lease.work_start_s, now)
        if work_start > lease.started_s:
            recorder.idle.append((lease.started_s, work_start, gpus))
        if kept_until > lease.work_start_s:
            recorder.useful.append((lease.work_start_s, kept_until, gpus))
        if now > max(kept_until, lease.work_start_s):
            recorder.lost.append((max(kept_until, lease.work_start_s), now, gpus))
        recorder.cost += gpus * (now - lease.started_s) * self.cards.price(lease.card_type) / 3600.0
        work_began = now > lease.work_start_s or (now == lease.work_start_s and kept_until == now)
        if work_began and run.work_began_s is None:
            run.work_began_s = lease.work_start_s
            recorder.waits[task.task_id] = lease.work_start_s - task.submit_s
        used = gpus * (now - lease.started_s) / 3600.0
        self._charge(task.project, used - lease.charged_gpu_hours)

    def _charge(self, project: str, gpu_hours: float) -> None:
        account = self._quotas.get(project)
        if account is not None and gpu_hours:
            self._quotas[project] = replace(account, remaining_gpu_hours=account.remaining_gpu_hours - gpu_hours)
