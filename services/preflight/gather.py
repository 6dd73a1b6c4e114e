"""Gathering the pre-flight facts: every check a submission will face, made without submitting it.

    facts = await gather_for_submission(pool, objects, raw, now)   # POST /v1/check
    facts = await gather_for_task(pool, view, now)                 # GET /v1/tasks/{id}/check

Read-only, from what the services keep: templates (schema `config`), the site's limits, S3 (a HEAD
per input; datasets from `readiness.datasets`), the card catalog in force and the live fleet
(`matcher.fleet`), and the dispatcher's own records (`dispatcher` schema: nodes, active leases,
open tasks, quota accounts with their usage) as the snapshot and queue `plan()` would see, with
the policy document in force. The submission is then planned as if it were queued now (data
ready, approved), and its estimated start comes from `shared.scheduling.estimate`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import asyncpg

from services.config.holder import PolicyInForce, policy_in_force_holder
from services.config.template_lookup import load_template_lookup
from services.dispatcher.store import load_everything
from services.dispatcher.working_set import WorkingSet
from services.matcher.decide import Fleet, decide
from services.matcher.request import build_request
from services.matcher.service import catalog_in_force
from services.preflight.checklist import Facts, InputFact, InputNote, QuotaFigures
from services.readiness.checks import Probe, plan_input_check
from services.readiness.probing import HeadsObjects, probe_key
from shared.cards import load_catalog
from shared.config import resolve_submission
from shared.leasing.approvals import approval_needed
from shared.scheduling.estimate import estimate_starts
from shared.scheduling.model import CardOption, PriorityClass, QueuedTask
from shared.scheduling.policy_knobs import Policy
from shared.scheduling.ordering import order_queue
from shared.scheduling.plan import plan
from shared.scheduling.quota import QuotaBook
from shared.submission import DatasetRef, SubmissionInvalid, TaskSubmission, site_limits, validate_submission
from shared.submission.validate import read_json_object

DISPATCHER = "dispatcher"
CANDIDATE = "(this submission)"


async def gather_for_submission(pool: asyncpg.Pool, objects: HeadsObjects | None, raw: Any, now: datetime) -> Facts:
    """The facts for a submission not yet made (see the module docstring)."""
    try:
        body = read_json_object(raw)
    except SubmissionInvalid as invalid:
        return Facts(problems=invalid.problems, now=now)
    async with pool.acquire() as conn:
        resolved, problems = resolve_submission(body, await load_template_lookup(conn, [body]))
        template = resolved.get("template") if isinstance(resolved, dict) and not problems else None
        if not problems:
            try:
                submission = validate_submission(resolved, site_limits())
            except SubmissionInvalid as invalid:
                problems = invalid.problems
        if problems:
            return Facts(template=None, problems=problems, now=now)
        inputs = await _input_facts(conn, objects, submission)
        return await _planned(conn, submission, None, template, inputs, None, now)


async def gather_for_task(pool: asyncpg.Pool, task_id: str, submission: TaskSubmission, template: str | None,
                          inputs: list[InputFact], now: datetime) -> Facts:
    """The facts for a task already submitted (it keeps its place in the queue)."""
    async with pool.acquire() as conn:
        return await _planned(conn, submission, task_id, template, inputs, await _approved_by(conn, task_id), now)


async def _planned(conn: asyncpg.Connection, submission: TaskSubmission, task_id: str | None, template: str | None,
                   inputs: list[InputFact], approved_by: str | None, now: datetime) -> Facts:  # fmt: skip
    policy = await _policy(conn)
    catalog_holder = catalog_in_force(load_catalog())
    await catalog_holder.refresh(conn)
    catalog = catalog_holder.value.catalog
    decision = decide(build_request(submission), catalog, await _fleet(conn))
    facts = Facts(template=template, inputs=inputs, now=now, deadline=submission.deadline, currency=catalog.currency,
                  approved_by=approved_by, reviewers=policy.document.reviewers.of(submission.project))
    if not decision.matched or decision.result is None:
        return replace(facts, unmatchable=decision.detail)
    options = tuple(CardOption(e.card_type, e.runtime_s, e.cost) for e in decision.result.ranked)
    return await _with_plan(conn, replace(facts, match=decision.result), submission, task_id, options, policy, now)


async def _with_plan(conn: asyncpg.Connection, facts: Facts, submission: TaskSubmission, task_id: str | None,
                     options: tuple[CardOption, ...], policy: PolicyInForce, now: datetime) -> Facts:  # fmt: skip
    state = await _dispatcher_state(conn)
    now_s = now.timestamp()
    candidate = QueuedTask(
        task_id=task_id or CANDIDATE, project=submission.project, priority_class=PriorityClass(submission.priority_class),
        priority=submission.priority, gpus=submission.gpus, submitted_at=now_s, options=options,
        heavy=submission.is_heavy, deadline=submission.deadline.timestamp() if submission.deadline else None,
        checkpoint_interval_s=submission.checkpoint.interval_minutes * 60.0 if submission.checkpoint else None,
    )
    if state is None:
        snapshot, queue = None, [candidate]
    else:
        snapshot = state.snapshot(now_s)
        known = state.queue.get(candidate.task_id)
        candidate = replace(candidate, submitted_at=known.submitted_at) if known is not None else candidate
        queue = [task for task in state.plan_queue() if task.task_id != candidate.task_id] + [candidate]
    rules = approval_needed(candidate, policy.document.approvals.rules)
    facts = replace(facts, approval_rules=() if facts.approved_by else rules)
    if snapshot is None:
        return replace(facts, planned=False)
    decided = plan(snapshot, queue, policy.scheduling, now_s)
    estimates = estimate_starts(snapshot, order_queue(queue, policy.scheduling, now_s), decided, now_s)
    estimate = estimates.get(candidate.task_id)
    return replace(facts, estimate=estimate, **_quota_facts(snapshot.quotas, candidate, estimate, policy.scheduling, now_s))


def _quota_facts(quotas: Any, candidate: QueuedTask, estimate: Any, policy: Policy, now_s: float) -> dict[str, Any]:
    """The quota verdict on the card type it would run on, from now to its estimated end, and its figures."""
    card = estimate.card_type if estimate is not None and estimate.card_type else candidate.options[0].card_type
    option = next(o for o in candidate.options if o.card_type == card)
    end = estimate.end_at if estimate is not None and estimate.end_at is not None else now_s + option.runtime_s
    stretched = CardOption(card, max(option.runtime_s, end - now_s), option.cost)  # it must last to the estimated end
    verdict = QuotaBook(quotas, policy, now_s).verdict(replace(candidate, options=(stretched,)), stretched)
    left = quotas[verdict.account.account_id].remaining_gpu_hours if verdict.account is not None else None
    figures = QuotaFigures(left_gpu_hours=left, needs_gpu_hours=candidate.gpus * option.runtime_s / 3600.0, task_end_at=end)
    return {"quota": verdict, "quota_figures": figures}


async def _input_facts(conn: asyncpg.Connection, objects: HeadsObjects | None, submission: TaskSubmission) -> list[InputFact]:
    facts = []
    for position, ref in enumerate(submission.inputs):
        check = plan_input_check(position, ref)
        if isinstance(ref, DatasetRef):
            signalled = await _dataset_signalled(conn, ref.dataset, ref.version)
            facts.append(InputFact(check.key, signalled, "" if signalled else InputNote.NOT_SIGNALLED))
        elif objects is None:
            facts.append(InputFact(check.key, None, InputNote.NO_STORE))
        else:
            probe = await probe_key(objects, check.key, timeout=10.0)
            present = {Probe.FOUND: True, Probe.NOT_FOUND: False}.get(probe.probe)
            facts.append(InputFact(check.key, present, {True: "", False: InputNote.NOT_FOUND}.get(present, probe.error or "")))
    return facts


async def _dataset_signalled(conn: asyncpg.Connection, dataset: str, version: str) -> bool | None:
    if not await conn.fetchval("SELECT to_regclass('readiness.datasets') IS NOT NULL"):
        return None
    return bool(await conn.fetchval("SELECT 1 FROM readiness.datasets WHERE dataset = $1 AND version = $2",
                                    dataset, version))


async def _fleet(conn: asyncpg.Connection) -> Fleet:
    if not await conn.fetchval("SELECT to_regclass('matcher.fleet') IS NOT NULL"):
        return Fleet({})
    rows = await conn.fetch("SELECT card_type, sum(gpus) AS gpus FROM matcher.fleet WHERE alive GROUP BY card_type")
    return Fleet({row["card_type"]: int(row["gpus"]) for row in rows})


async def _dispatcher_state(conn: asyncpg.Connection) -> WorkingSet | None:
    """The dispatcher's records as its leader would load them (None before the dispatcher ever ran)."""
    if not await conn.fetchval(f"SELECT to_regclass('{DISPATCHER}.queue_estimates') IS NOT NULL"):
        return None
    async with conn.transaction(readonly=True, isolation="repeatable_read"):
        return await load_everything(conn, DISPATCHER, 0.0)


async def _approved_by(conn: asyncpg.Connection, task_id: str) -> str | None:
    if not await conn.fetchval(f"SELECT to_regclass('{DISPATCHER}.tasks') IS NOT NULL"):
        return None
    return await conn.fetchval(f"SELECT approved_by FROM {DISPATCHER}.tasks WHERE task_id = $1", task_id)


async def _policy(conn: asyncpg.Connection) -> PolicyInForce:
    holder = policy_in_force_holder(fallback=Policy())
    await holder.refresh(conn)
    return holder.value
