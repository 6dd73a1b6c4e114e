"""One batch of `cf:events`, folded in stream order into the matcher's effects (pure).

The handler loads the fleet (and, when the batch registers nodes, the pending tasks: waiting and
open), then `fold_batch` applies the events one by one, so a task submitted before a registration in
the same batch is matched against the fleet as it was, then again after it:

- `task.submitted` -> decide over the live fleet; a match row, a task row, one event;
- `node.registered` -> the node is alive; if its card type gained GPUs, every open task (matched,
  not yet granted) is ranked again and gets a new match + `task.matched` when its ranking changed
  ("re-matched: <card> joined the fleet"), and every waiting task is decided again and gets a new
  match + event when it is now matched or its reason changed;
- `node.lost` -> the node is gone (tasks already matched keep their match);
- `config.changed` of `cards` -> a new card catalog is in force (the handler loaded it before the
  fold; the whole batch ranks with it): every open task matched under another catalog is ranked
  again ("re-matched: card catalog version N in force"), and every waiting or unmatchable task
  is decided again and gets a new match + event when it is now matched or its reason changed;
- `task.cancelled` -> the task stops waiting / its match closes.

Closing events (`lease.granted`, `task.succeeded` / `task.failed` / `task.rejected`) close a task's
match for good. They are collected before the fold (`closes_of`): the dispatcher has already acted on
the match, so a registration earlier in the same batch does not re-rank those tasks.

Every match has exactly one emission, in the same order (`BatchEffects.matches[i]` is announced
by `BatchEffects.emissions[i]`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from shared.events.emission import Emission
from services.matcher.decide import Fleet, MatchDecision, decide
from services.matcher.match_reasons import RematchTrigger, rematch_facts, rematch_text
from services.matcher.request import build_request, request_to_json
from shared.cards import Catalog, MatchRequest
from shared.config import CARDS
from shared.events import (
    CardEstimate,
    ConfigChanged,
    Envelope,
    LeaseGranted,
    NodeLost,
    NodeRegistered,
    TaskCancelled,
    TaskFailed,
    TaskMatched,
    TaskMatchedData,
    TaskRejected,
    TaskSubmitted,
    TaskSucceeded,
    TaskUnmatchable,
    TaskUnmatchableData,
    new_event_id,
)
from shared.events.subjects import task_subject

DECISION_TYPES: tuple[type[Envelope], ...] = (TaskSubmitted, NodeRegistered, NodeLost, TaskCancelled, ConfigChanged)
"""Events that lead to decisions: applied once per id (inbox)."""
CLOSING_TYPES: tuple[type[Envelope], ...] = (LeaseGranted, TaskSucceeded, TaskFailed, TaskRejected)
"""Events that close a task's match; idempotent status updates, so they skip the inbox."""
RELEVANT_TYPES = DECISION_TYPES + CLOSING_TYPES
FLEET_TYPES: tuple[type[Envelope], ...] = (NodeRegistered, NodeLost)


@dataclass(frozen=True, slots=True)
class MatcherConfig:
    """The card catalog in force and its fingerprint (stored with every match)."""

    catalog: Catalog
    catalog_hash: str


def changes_catalog(event: Envelope) -> bool:
    """True for `config.changed` of the `cards` document (a new catalog is in force)."""
    return isinstance(event, ConfigChanged) and event.data.name == CARDS.name


@dataclass(frozen=True, slots=True)
class NodeState:
    node_id: str
    agent_id: str
    card_type: str
    gpus: int
    alive: bool
    changed_at: datetime


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task as `matcher.tasks` holds it."""

    task_id: str
    project: str
    request: MatchRequest
    status: str  # matched | waiting | unmatchable | granted | finished | cancelled
    last_match_id: str
    last_detail: str
    last_ranked: tuple[str, ...] = ()  # adequate card types of the latest match, in rank order
    last_catalog_hash: str = ""  # fingerprint of the catalog the latest match used


@dataclass(frozen=True, slots=True)
class StoredMatch:
    """One row of `matcher.matches` (the emitted event's id is added when it is written)."""

    match_id: str
    task_id: str
    trigger: str
    request: dict[str, Any]
    ranking: list[dict[str, Any]]
    matched: bool
    chosen: str | None
    oversized: bool
    unmatchable_reason: str | None
    reason: str
    fleet: dict[str, int]
    catalog_version: str
    catalog_hash: str
    reason_facts: dict[str, Any] | None = None  # the numbers of the choice (`match_reasons`), when matched


@dataclass
class BatchEffects:
    """What a batch changes: node rows, matches with their events, task rows, cancelled and closed tasks."""

    nodes: dict[str, NodeState] = field(default_factory=dict)
    matches: list[StoredMatch] = field(default_factory=list)
    emissions: list[Emission] = field(default_factory=list)
    tasks: dict[str, TaskRow] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    closed: dict[str, str] = field(default_factory=dict)  # task id -> granted | finished


class _Fold:
    """The running state of one batch: live nodes, waiting, unmatchable and open tasks, and the effects so far."""

    def __init__(
        self, config: MatcherConfig, nodes: Mapping[str, NodeState], pending: Iterable[TaskRow], closed: dict[str, str]
    ) -> None:
        self.config = config
        self.nodes = dict(nodes)
        pending = [task for task in pending if task.task_id not in closed]
        self.waiting = {task.task_id: task for task in pending if task.status == "waiting"}
        self.open = {task.task_id: task for task in pending if task.status == "matched"}
        self.unmatchable = {task.task_id: task for task in pending if task.status == "unmatchable"}
        self.effects = BatchEffects(closed=closed)
        self._fleet: Fleet | None = None
        self._fleet_json: dict[str, int] = {}
        self._decisions: dict[MatchRequest, tuple[MatchDecision, list[dict[str, Any]]]] = {}
        self._requests: dict[MatchRequest, dict[str, Any]] = {}

    def fleet(self) -> Fleet:
        if self._fleet is None:
            gpus: dict[str, int] = defaultdict(int)
            for node in self.nodes.values():
                if node.alive:
                    gpus[node.card_type] += node.gpus
            self._fleet = Fleet(gpus)
            self._fleet_json = dict(self._fleet.gpus_by_type)
        return self._fleet

    def decide(self, request: MatchRequest) -> tuple[MatchDecision, list[dict[str, Any]]]:
        """`decide` over the current fleet, with its ranking JSON; memoised until the fleet changes."""
        if request not in self._decisions:
            decision = decide(request, self.config.catalog, self.fleet())
            self._decisions[request] = decision, ranking_json(decision)
        return self._decisions[request]

    def apply(self, event: Envelope) -> None:
        if isinstance(event, TaskSubmitted):
            self.submitted(event)
        elif isinstance(event, NodeRegistered):
            self.registered(event)
        elif isinstance(event, NodeLost):
            self.lost(event)
        elif isinstance(event, TaskCancelled):
            self.cancelled(event.data.task_id)
        elif changes_catalog(event):
            self.catalog_changed(event)

    def submitted(self, event: TaskSubmitted) -> None:
        submission = event.data.submission
        request = build_request(submission)
        task = TaskRow(event.data.task_id, submission.project, request, "new", "", "")
        self.record(task, *self.decide(request), "submitted", event)

    def registered(self, event: NodeRegistered) -> None:
        data = event.data
        before = self.fleet().gpus(data.card_type)
        self.set_node(NodeState(data.node_id, data.agent_id, data.card_type, data.gpus, True, event.occurred_at))
        if self.fleet().gpus(data.card_type) <= before:
            return
        again = rematch_facts(RematchTrigger.FLEET_CHANGED, card_type=data.card_type)
        for task in list(self.open.values()):
            decision, ranking = self.decide(task.request)
            if decision.matched and ranked_types(decision) != task.last_ranked:
                self.record(task, decision, ranking, "fleet_changed", event, again)
        for task in list(self.waiting.values()):
            decision, ranking = self.decide(task.request)
            if decision.matched or decision.detail != task.last_detail:
                self.record(task, decision, ranking, "fleet_changed", event)

    def catalog_changed(self, event: Envelope) -> None:
        again = rematch_facts(RematchTrigger.CATALOG_CHANGED, catalog_version=self.config.catalog.version)
        for task in list(self.open.values()):
            if task.last_catalog_hash != self.config.catalog_hash:
                self.record(task, *self.decide(task.request), "catalog_changed", event, again)
        for task in [*self.waiting.values(), *self.unmatchable.values()]:
            decision, ranking = self.decide(task.request)
            if decision.matched or decision.detail != task.last_detail:
                self.record(task, decision, ranking, "catalog_changed", event)

    def lost(self, event: NodeLost) -> None:
        node = self.nodes.get(event.data.node_id)
        if node is not None and node.alive:
            self.set_node(replace(node, alive=False, changed_at=event.occurred_at))

    def cancelled(self, task_id: str) -> None:
        self.waiting.pop(task_id, None)
        self.open.pop(task_id, None)
        self.unmatchable.pop(task_id, None)
        self.effects.cancelled.add(task_id)
        task = self.effects.tasks.get(task_id)
        if task is not None:
            self.effects.tasks[task_id] = replace(task, status="cancelled")

    def set_node(self, node: NodeState) -> None:
        self.nodes[node.node_id] = node
        self.effects.nodes[node.node_id] = node
        self._fleet = None
        self._decisions.clear()

    def record(
        self,
        task: TaskRow,
        decision: MatchDecision,
        ranking: list[dict[str, Any]],
        trigger: str,
        cause: Envelope,
        again: dict[str, str] | None = None,
    ) -> None:
        """A match row, the task's new row and the event announcing the decision (`again`, when
        given, says why it was matched again: the prefix of the reason sentence of both)."""
        request_json = self._requests.setdefault(task.request, request_to_json(task.request))
        self.fleet()
        reason = f"{rematch_text(again)}; {decision.detail}" if again else decision.detail
        match = stored_match(task, request_json, decision, ranking, trigger, self._fleet_json, self.config, reason, again)
        status = "matched" if decision.matched else ("waiting" if decision.waits_for_fleet else "unmatchable")
        row = replace(
            task, status=status, last_match_id=match.match_id, last_detail=decision.detail,
            last_ranked=ranked_types(decision), last_catalog_hash=self.config.catalog_hash,
        )  # fmt: skip
        self.effects.matches.append(match)
        self.effects.emissions.append(emission(row, decision, cause, self.config, reason))
        self.effects.tasks[row.task_id] = row
        self.effects.cancelled.discard(row.task_id)
        for status_of, tasks in (("waiting", self.waiting), ("matched", self.open), ("unmatchable", self.unmatchable)):
            if status == status_of:
                tasks[row.task_id] = row
            else:
                tasks.pop(row.task_id, None)


def fold_batch(
    events: Iterable[Envelope], config: MatcherConfig, nodes: Mapping[str, NodeState], pending: Iterable[TaskRow]
) -> BatchEffects:
    """Apply `events` in order over the loaded fleet and pending (waiting or open) tasks; return what
    to write. Tasks that a closing event of the batch names are neither re-ranked nor re-decided."""
    events = list(events)
    fold = _Fold(config, nodes, pending, closes_of(events))
    for event in events:
        fold.apply(event)
    return fold.effects


def closes_of(events: Iterable[Envelope]) -> dict[str, str]:
    """Task id -> `granted` (lease.granted) or `finished` (succeeded / failed / rejected); the
    latest in stream order wins, except that `finished` is never undone."""
    closed: dict[str, str] = {}
    for event in events:
        if isinstance(event, LeaseGranted):
            closed.setdefault(event.data.task_id, "granted")
        elif isinstance(event, (TaskSucceeded, TaskFailed, TaskRejected)):
            closed[event.data.task_id] = "finished"
    return closed


def ranked_types(decision: MatchDecision) -> tuple[str, ...]:
    """The adequate card types of `decision`, in rank order (empty when unmatchable)."""
    return tuple(e.card_type for e in decision.result.ranked) if decision.result else ()


def stored_match(
    task: TaskRow,
    request_json: dict[str, Any],
    decision: MatchDecision,
    ranking: list[dict[str, Any]],
    trigger: str,
    fleet: dict[str, int],
    config: MatcherConfig,
    reason: str | None = None,
    again: dict[str, str] | None = None,
) -> StoredMatch:
    """The row of `matcher.matches` for `decision` (`ranking` = `ranking_json(decision)`,
    `request_json` = `request_to_json(task.request)`, `fleet` = live GPUs per card type; passed in so
    that matches of one decision share them and the store serialises each once; `reason` defaults
    to the decision's sentence; `again` says why the task was matched again)."""
    result = decision.result
    facts = None if decision.choice is None else {**decision.choice, **({"again": again} if again else {})}
    return StoredMatch(
        match_id=new_event_id(),
        task_id=task.task_id,
        trigger=trigger,
        request=request_json,
        ranking=ranking,
        matched=decision.matched,
        chosen=result.chosen.card_type if result and result.chosen else None,
        oversized=bool(result and result.oversized),
        unmatchable_reason=decision.unmatchable.value if decision.unmatchable else None,
        reason=decision.detail if reason is None else reason,
        fleet=fleet,
        catalog_version=config.catalog.version,
        catalog_hash=config.catalog_hash,
        reason_facts=facts,
    )


def ranking_json(decision: MatchDecision) -> list[dict[str, Any]]:
    """Every card type: adequate ones first in rank order (rank 1 = chosen), then the others by name."""
    ranked = [e.card_type for e in decision.result.ranked] if decision.result else []
    rank_of = {card_type: position for position, card_type in enumerate(ranked, start=1)}
    rows = [
        {
            "card_type": v.card_type,
            "rank": rank_of.get(v.card_type),
            "runtime_s": v.runtime_s,
            "cost": v.cost,
            "fleet_gpus": v.fleet_gpus,
            "why_not": v.why_not or None,
            "why_not_code": v.why_not_code.value if v.why_not_code else None,
            "why_not_facts": dict(v.why_not_facts) or None,
        }
        for v in decision.verdicts
    ]
    return sorted(rows, key=lambda row: (row["rank"] is None, row["rank"] or 0, row["card_type"]))


def emission(
    task: TaskRow, decision: MatchDecision, cause: Envelope, config: MatcherConfig, reason: str | None = None
) -> Emission:
    """`task.matched` with the ranking, or `task.unmatchable` with the reason (`reason` replaces the
    decision's sentence in a `task.matched`)."""
    subject = task_subject(task.task_id)
    result = decision.result
    if result is None or result.chosen is None:
        assert decision.unmatchable is not None
        data = TaskUnmatchableData(task_id=task.task_id, reason=decision.unmatchable, detail=decision.detail)
        return Emission(TaskUnmatchable, subject, data, cause=cause)
    matched = TaskMatchedData(
        task_id=task.task_id,
        ranking=tuple(CardEstimate(card_type=e.card_type, est_runtime_s=e.runtime_s, est_cost=e.cost) for e in result.ranked),
        chosen=result.chosen.card_type,
        reason=result.reason if reason is None else reason,
        oversized=result.oversized,
        catalog_version=config.catalog.version,
    )
    return Emission(TaskMatched, subject, matched, cause=cause)
