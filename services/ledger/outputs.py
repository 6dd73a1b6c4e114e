"""A run's counted output and the increments that change it (pure; `batch.fold_batch` drives it).

The ledger counts, per run (lease) of a task, the highest output reported (`ledger.task_output`). Each
change of that counted value is an **output increment** (`ledger.output_increments`), the way each
accounted interval of a lease is a usage increment:

- a report (`task.checkpointed`, `task.succeeded` without flags) above the run's counted value: `+rise`;
- a flagged success: `-counted` (the run's output so far leaves every total; `ledger.flagged_output`
  holds it);
- a clearing of that flag: `+held` above whatever the run counts then.

So a run's increments always add up to its counted output, and a round counts its output as the sum
of the increments its close marks (`round_inputs.load_round_inputs`): each once, whenever the ledger applied
them. The fold starts from the rows the handler loaded and locked (`OutputSnapshot`) and leaves the
final state of every run it touched, which `store.save_effects` writes as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from enum import StrEnum

Run = tuple[str, str]
"""(task_id, lease_id): one run of a task."""


class OutputCause(StrEnum):
    """Why a run's counted output changed (`output_increments.cause`)."""

    REPORTED = "reported"
    """A checkpoint or an unflagged success reported more than the run counted."""
    FLAGGED = "flagged"
    """The run's success was flagged: what it counted leaves the totals (a negative increment)."""
    CLEARED = "cleared"
    """A person cleared the flag: the held-back output counts again, from the moment of clearing."""
    BACKFILLED = "backfilled"
    """Written by migration 010 for output counted before increments existed."""


@dataclass(frozen=True, slots=True)
class RunOutput:
    """Output one run (lease) of a task reported, cumulative for that run."""

    task_id: str
    lease_id: str
    output_units: Decimal
    final: bool
    reported_at: datetime


@dataclass(frozen=True, slots=True)
class FlaggedOutput:
    """A run whose success is flagged: its output (and the refused claim) kept apart, never counted."""

    task_id: str
    lease_id: str
    output_units: Decimal | None
    claimed_output_units: Decimal | None
    flags: tuple[str, ...]
    detail: str
    reported_at: datetime
    event_id: str


@dataclass(frozen=True, slots=True)
class ClearedFlag:
    """A person cleared the flag of a task's flagged success (`task.flag_cleared`): the runs it clears."""

    task_id: str
    cleared_at: datetime
    cleared_by: str
    reason: str
    event_id: str
    lease_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OutputIncrement:
    """One change of a run's counted output (negative for a flag); `at` decides the earliest round
    that may count it (the first whose end is after it and that closes after the ledger applied it)."""

    task_id: str
    lease_id: str
    card_type: str | None
    output_units: Decimal
    at: datetime
    cause: OutputCause
    event_id: str


@dataclass(frozen=True, slots=True)
class OutputSnapshot:
    """What the handler loaded (and locked) for a batch's output events."""

    counted: Mapping[Run, RunOutput] = field(default_factory=dict)
    """`task_output` rows of the runs the batch reports on or clears (a run without a row counts 0)."""
    held: Mapping[Run, Decimal | None] = field(default_factory=dict)
    """Flagged runs not cleared yet of the tasks the batch clears: their held-back output (None: none)."""
    cards: Mapping[str, str] = field(default_factory=dict)
    """Card type per lease id of those runs, where the ledger has the lease."""


@dataclass
class OutputEffects:
    rows: dict[Run, RunOutput] = field(default_factory=dict)
    """The final state of every touched run that counts output (inserted or updated as it is)."""
    uncounted: set[Run] = field(default_factory=set)
    """Runs whose stored row goes (their success was flagged)."""
    stored: frozenset[Run] = frozenset()
    """Runs that had a row when loaded: updated, not inserted."""
    flagged: dict[Run, FlaggedOutput] = field(default_factory=dict)
    cleared: list[ClearedFlag] = field(default_factory=list)
    increments: list[OutputIncrement] = field(default_factory=list)


class OutputFold:
    """Applies output events in stream order over an `OutputSnapshot`; `card_of(lease_id)` names the
    card type of a run where known (increments carry it; a round looks it up otherwise)."""

    def __init__(self, snapshot: OutputSnapshot, effects: OutputEffects, card_of: Callable[[str], str | None]) -> None:
        self.runs: dict[Run, RunOutput | None] = dict(snapshot.counted)
        self.held = dict(snapshot.held)
        self.card_of = card_of
        self.effects = effects
        effects.stored = frozenset(snapshot.counted)

    def report(self, run: Run, units: Decimal, final: bool, at: datetime, event_id: str,
               cause: OutputCause = OutputCause.REPORTED) -> None:  # fmt: skip
        """A checkpoint or unflagged success: the run counts the highest value reported."""
        row = RunOutput(run[0], run[1], units, final, at)
        before = self.runs.get(run)
        if before is not None:
            row = RunOutput(run[0], run[1], max(units, before.output_units), final or before.final,
                            max(at, before.reported_at))  # fmt: skip
        self.recount(run, row, at, cause, event_id)

    def flag(self, flagged: FlaggedOutput) -> None:
        """A flagged success: the run's counted output (with the success's own) is held back, not counted."""
        run = (flagged.task_id, flagged.lease_id)
        before = self.runs.get(run)
        units = [u for u in (flagged.output_units, before.output_units if before else None) if u is not None]
        held = max(units) if units else None
        self.effects.flagged[run] = replace(flagged, output_units=held)
        self.held[run] = held
        self.recount(run, None, flagged.reported_at, OutputCause.FLAGGED, flagged.event_id)

    def clear(self, clearing: ClearedFlag) -> None:
        """Every flagged run of the task not cleared yet is cleared; its held output counts from then, once."""
        runs = sorted(run for run in self.held if run[0] == clearing.task_id)
        for run in runs:
            held = self.held.pop(run)
            if held is not None:
                self.report(run, held, True, clearing.cleared_at, clearing.event_id, OutputCause.CLEARED)
        self.effects.cleared.append(replace(clearing, lease_ids=tuple(lease_id for _, lease_id in runs)))

    def recount(self, run: Run, row: RunOutput | None, at: datetime, cause: OutputCause, event_id: str) -> None:
        """Set the run's counted output to `row` (None: none counted), recording the change as an increment."""
        before = self.runs.get(run)
        change = (row.output_units if row else Decimal(0)) - (before.output_units if before else Decimal(0))
        if change:
            self.effects.increments.append(OutputIncrement(run[0], run[1], self.card_of(run[1]), change, at, cause,
                                                           event_id))  # fmt: skip
        self.runs[run] = row
        if row is not None:
            self.effects.rows[run] = row
            self.effects.uncounted.discard(run)
        else:
            self.effects.rows.pop(run, None)
            if run in self.effects.stored:
                self.effects.uncounted.add(run)
