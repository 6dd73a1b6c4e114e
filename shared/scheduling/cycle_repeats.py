"""Repeated failures inside one cycle: a task that would fail exactly like the last one of its shape.

`RepeatedFailures` is a part of `Cycle` (a mixin over the cycle's working state). Once the reservation is
settled, a task that is not core (or is past its preemption grace: `_past_grace`) and fails to start fails
exactly like the last task of the same shape did, as long as nothing changed since on the card types of its
usable options (no grant, no preemption there: `_changes_on`): the failure depends only on the shape — class,
GPUs, heavy, whether it checkpoints, and per usable card option its type, whether it returns within the
preemption grace and whether it would still run at the reservation's start — and on the state of those card
types: each one's pool (free GPUs, heavy counts, failure caches), the GPUs opportunistic work holds there
(`Borrowed`), and the reservation's guard, which only grants and preemptions on its own card type charge; the
sentences read the same (`Explainer`). Such a task gets the remembered deferral without a placement attempt;
only a "behind the reservation" sentence names the task's own runtime, so it is said again with it. The
failure caches of placement change on a failed attempt, but they only remember what would fail anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.scheduling import reasons
from shared.scheduling.explain import Miss
from shared.scheduling.model import CardOption, DeferralReason, QueuedTask, enum_members
from shared.scheduling.queue_columns import CHECKPOINTS, CORE, OPPORTUNISTIC

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
_KIND = CORE | OPPORTUNISTIC | CHECKPOINTS  # the flags that tell a task's class and whether it checkpoints



class RepeatedFailures:
    """Shapes, change counters and remembered failures of `Cycle`."""

    __slots__ = ()  # `Cycle` declares the slots of its working state

    def _changes(self) -> int:
        """Grows with every grant and preemption (`_changed_on`)."""
        return self.changes

    def _past_grace(self, task: QueuedTask) -> bool:
        """True for a core task that may preempt now whatever it may ever take (or preemption is off): its
        failure is a shape's like any other — its preemption attempt reads the victims of its card types, which
        only a preemption there takes (and marks: `_changed_on`); a failed attempt only teaches the victim index
        what would fail anyway. Past its grace, and with `policy.standard_yields_any_width_after_s` past that wait
        too (`_settles_after_s`: before it, a task of the same shape may take fewer victims). Unlike `_may_preempt`,
        asks for no revisit."""
        return self._past_grace_since(task.submitted_at)

    def _past_grace_since(self, submitted_at: float) -> bool:
        """`_past_grace` of a core task submitted at `submitted_at`."""
        return not self.policy.preemption or self.now >= submitted_at + self._settles_after_s

    def _changes_on(self, options: Sequence[CardOption]) -> int:
        """Grows with every grant and preemption on one of these options' card types (a sum of counters
        that only grow: the same sum means none of them moved) — what a remembered failure depends on."""
        changed = self._card_changes
        return sum([changed.get(option.card_type, 0) for option in options])

    def _changes_on_types(self, card_types: Sequence[str]) -> int:
        """`_changes_on` options of these card types."""
        changed = self._card_changes
        return sum([changed.get(card_type, 0) for card_type in card_types])

    def _changed_on(self, card_type: str) -> None:
        """A grant or preemption touched the card type (each calls this for every card type it touches)."""
        self._card_changes[card_type] = self._card_changes.get(card_type, 0) + 1
        self.changes += 1

    def _shape(self, task: QueuedTask, options: Sequence[CardOption]) -> tuple:
        grace, now, guard = self.policy.preempt_after_s, self.now, self.guard
        if guard is None:
            cards = tuple([(option.card_type, option.runtime_s <= grace) for option in options])
        else:
            reserved, start = guard.card_type, guard.start_at
            cards = tuple([(option.card_type, option.runtime_s <= grace,
                            option.card_type == reserved and now + option.runtime_s > start) for option in options])
        if self._borrow_bits:  # whether each option borrows the headroom (`covers_headroom`)
            cards = (cards, tuple([option.runtime_s <= self._borrow_s for option in options]))
        return (task.priority_class, task.gpus, task.heavy, task.checkpoint_interval_s is not None, cards)

    def _walk_shape(self, task_flags: int, shape_number: int, card_types: Sequence[str], runtimes: Sequence[float],
                    bits: int) -> tuple:
        """`_shape(task, task.options)` from a kept queue's columns: the class and whether the task checkpoints
        (its flags), the shape number (GPUs, heavy, card types) in place of those, and the per-option flags
        as the bits of one number — its `grace_bits`, then whether it would still run at the reservation's
        start on each option of the reserved card type, then (`_borrow_bits`) whether each option borrows the
        headroom: as telling, cheaper to make. (Such keys are never equal to `_shape`'s, which have another
        length.)"""
        if bits < 0:  # more options than the column holds
            bits = 1
            for runtime_s in runtimes:
                bits = bits + bits + (runtime_s <= self.policy.preempt_after_s)
        guard = self.guard
        if guard is not None:
            reserved = self._reserved_options.get(shape_number)
            if reserved is None:  # the guard is set once per cycle: its card type's options per shape hold
                reserved = self._reserved_options[shape_number] = [
                    index for index, card_type in enumerate(card_types) if card_type == guard.card_type]
            now, start = self.now, guard.start_at
            for index in reserved:
                bits = bits + bits + (now + runtimes[index] > start)
        if self._borrow_bits:  # whether each option borrows the headroom (`covers_headroom`)
            for runtime_s in runtimes:
                bits = bits + bits + (runtime_s <= self._borrow_s)
        return (task_flags & _KIND, shape_number, bits)

    def _repeat_failure(self, task: QueuedTask, options: Sequence[CardOption], shape: tuple) -> bool:
        """Defer the task as the last one of its shape if nothing changed since (True if so)."""
        known = self._repeats.get(shape)
        if known is None:
            return False
        changes = self.changes
        if known[4] != changes:  # a change somewhere since: was it on one of the shape's card types?
            if known[0] != self._changes_on(options):
                return False
            known[4] = changes
        _, reason, detail, index, _ = known
        if detail is None:
            detail = self._behind_reservation(options[index].runtime_s)
        self.defer(task.task_id, reason, detail)
        return True

    def _unchanged_since(self, known: list, card_types: Sequence[str]) -> bool:
        """True if no grant or preemption touched these card types (a remembered failure's shape's) since the
        failure was remembered (`known`, as `_remember_failure` keeps it), the cycle's changes elsewhere aside;
        marks it checked at the cycle's changes now (the settled walk's `_repeat_failure` check)."""
        if known[0] != self._changes_on_types(card_types):
            return False
        known[4] = self.changes
        return True

    def _behind_reservation(self, runtime_s: float) -> str:
        """The "behind the reservation" sentence of a task running `runtime_s` on the option it names, kept per
        whole minute of runtime (`reasons.format_duration` says no more than whole minutes from a minute on)."""
        if not runtime_s >= 60.0:
            return self._behind_reservation_start() + reasons.format_duration(runtime_s)
        minutes = int(runtime_s // 60)
        text = self._behind_texts.get(minutes)
        if text is None:
            text = self._behind_texts[minutes] = self._behind_reservation_start() + reasons.format_duration(runtime_s)
        return text

    def _behind_reservation_start(self) -> str:
        """`reasons.behind_reservation_start` for the cycle's reservation (made once: the guard is set once)."""
        if self._behind_start is None:
            guard = self.guard
            assert guard is not None
            self._behind_start = reasons.behind_reservation_start(guard.holder, guard.card_type, guard.start_at - self.now)
        return self._behind_start

    def _remember_failure(self, shape: tuple, options: Sequence[CardOption], miss: Miss) -> None:
        """Remember how the shape's attempt went: [`_changes_on` its options, the reason, the sentence (None:
        "behind the reservation", said with each task's runtime on the option at the index that follows),
        `_changes()` when the first value was last found unchanged]."""
        last_reason, last_detail = self.deferred_reasons[-1], self.deferred_details[-1]
        stamp, changes = self._changes_on(options), self._changes()
        if last_reason == R.BEHIND_RESERVATION:
            if miss.reason != R.BEHIND_RESERVATION:
                return
            self._repeats[shape] = [stamp, last_reason, None, options.index(miss.option), changes]
        else:
            self._remember_said(shape, stamp)

    def _remember_said(self, shape: tuple, stamp: int) -> None:
        """Remember the deferral just said (its reason and sentence) as the shape's failure, `stamp` being
        `_changes_on` its options: `_remember_failure`'s entry for any reason but "behind the reservation"."""
        self._repeats[shape] = [stamp, self.deferred_reasons[-1], self.deferred_details[-1], 0, self._changes()]
