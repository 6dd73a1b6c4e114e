"""The walk over the rest of the queue once the cycle's reservation is settled: the cheap path most tasks take.

`SettledWalk` is a part of `Cycle` (a mixin over the cycle's working state). Once the reservation is settled,
a task that cannot start changes nothing, so most tasks are deferred from what their shape already showed —
no room since the last grant or preemption on its card types, a quota refusal kept since the project's last
charge — without a placement attempt: over a kept queue's columns (`_walk_settled`, the task object read only
when the columns cannot decide it) or over a list of tasks (`_walk_settled_tasks`). The rest go through
`Cycle._consider_room` / `_attempt` (after `_walk_shape`'s repeated failure), exactly as `Cycle.consider` would take
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from shared.scheduling.eligibility import readiness_failure, readiness_failures
from shared.scheduling.model import DeferralReason, PriorityClass, QueuedTask, enum_members
from shared.scheduling.queue_columns import CORE, WalkColumns, longest_of, runtimes_of
from shared.scheduling.quota import SECONDS_PER_HOUR

R = enum_members(DeferralReason)  # R.NO_CAPACITY is DeferralReason.NO_CAPACITY, read faster
_CARD_TYPE = attrgetter("card_type")
P = enum_members(PriorityClass)
_CONSIDERED = ("considered", "on the options its quota allows")  # `_walk_settled`: no deferral to add, only `closed` to check



class SettledWalk:
    """The settled walk of `Cycle` (`Cycle.walk` hands over to it once the reservation is settled)."""

    __slots__ = ()  # `Cycle` declares the slots of its working state

    def _walk_settled_tasks(self, ordered: Sequence[QueuedTask], start: int) -> None:
        """`_walk_settled` for a queue without columns (a list: a cold plan, the simulator's first cycle): the
        same shortcuts, keyed by a task's (GPUs, heavy, card types) read from the task instead of the kept
        queue's shape number: the quota is asked by the task's longest runtime against the shape's kept bound
        (`QuotaBook.allows_longest`; `usable_indexes` when that fails) — unless a refusal kept for the project and
        shape since its last charge (`QuotaBook.refusals`) refuses it from its runtimes —, and a ready task whose quota allows all
        its options and whose shape already found no room since the last grant or preemption on one of its card
        types is deferred with that shape's NO_CAPACITY sentence (a core task unless it may preempt); a shape's
        room check is kept while `Fleet.version` stands. Exact for the same reasons; the rest goes through
        `_consider_usable` (the quota allows some options) or `_consider_room` (room, or preemption may help), as
        `consider` would."""
        fleet, limited, quota, explain, policy = self.fleet, self._limited, self.quota, self.explain, self.policy
        gate, core, no_capacity = policy.readiness_gate, P.CORE, R.NO_CAPACITY
        longest_bounds, refusals, no_bounds, margin = quota.longest_bounds, quota.refusals, {}, policy.quota_expiry_margin_s
        no_room: dict[tuple, list] = {}  # shape -> [`_changes()` when checked, the sentence, `_changes_on` then]
        rooms: dict[tuple, tuple[int, bool]] = {}  # shape -> (`fleet.version` then, `fleet.may_have_room`)
        helps: dict[tuple, tuple[int, bool]] = {}  # shape -> (victim index version then, `_preemption_may_help`)
        add_id, add_reason, add_detail = (self.deferred_ids.append, self.deferred_reasons.append,
                                          self.deferred_details.append)
        for position in range(start, len(ordered)):  # not closed at `start` (`walk` checked)
            task = ordered[position]
            options = task.options
            if (gate and not task.data_ready) or not options or not task.approved:
                failure = readiness_failure(task, policy)
                add_id(task.task_id)
                add_reason(failure[0])
                add_detail(failure[1])
                continue
            shape = (task.gpus, task.heavy, tuple(map(_CARD_TYPE, options)))
            considered = False  # on some of its options (the quota allows only those)
            if task.project in limited:  # the quota as `_walk_settled` asks it, the shape as its key
                project = task.project
                # what refused earlier tasks since the project's last charge; the same check as `_walk_settled`'s, kept
                # inline: as one helper method for both it cost +0.5–1.0% instructions per cold plan (BENCHMARKS.md, session 17)
                runtimes = runtimes_of(task)
                refused = refusals.get(project)
                if refused is not None and (refusal := refused.get(shape)) is not None and (
                        failure := refusal.of(runtimes)) is not None:
                    add_id(task.task_id)
                    add_reason(failure[0])
                    add_detail(failure[1])
                    continue
                longest_s = longest_of(runtimes)
                bound = longest_bounds.get(project, no_bounds).get(shape)
                if bound is None:  # not yet asked since the project's last charge
                    allowed = quota.allows_longest(project, shape, shape[2], shape[0], longest_s)
                else:  # `allows_longest` with its kept bound, inlined
                    allowed = not (bound[0] < longest_s + margin or bound[1] < shape[0] * longest_s / SECONDS_PER_HOUR)
                if not allowed:
                    usable, failure = quota.usable_indexes(project, shape[2], shape[0], runtimes, shape)
                    if failure is not None:
                        add_id(task.task_id)
                        add_reason(failure[0])
                        add_detail(failure[1])
                        continue
                    if len(usable) < len(options):  # some of its options
                        self._consider_usable(task, tuple([options[index] for index in usable]))
                        considered = True
            if not considered:
                changes = self.changes
                known = no_room.get(shape)
                if known is not None and (known[0] == changes or self._still_no_room(known, shape[2], changes)):
                    if not (task.priority_class == core and self._may_preempt_since(task.submitted_at)
                            and self._shape_may_preempt(shape, shape, helps)):
                        add_id(task.task_id)
                        add_reason(no_capacity)
                        add_detail(known[1])
                        continue
                else:
                    if known is None:
                        room = rooms.get(shape)
                        if room is None or room[0] != fleet.version:
                            room = rooms[shape] = (fleet.version, fleet.may_have_room(*shape))
                        has_room = room[1]
                    else:  # its room check failed before: it fails for the rest of the cycle, only its sentence may not hold
                        has_room = False
                    if not (has_room or (task.priority_class == core and self._may_preempt_since(task.submitted_at)
                                         and self._shape_may_preempt(shape, shape, helps))):  # `_may_start`
                        text = explain.no_capacity(task, options)
                        add_id(task.task_id)
                        add_reason(no_capacity)
                        add_detail(text)
                        no_room[shape] = [changes, text, self._changes_on_types(shape[2])]
                        continue
                self._consider_room(task, options)  # `_may_start` holds
            # Only the calls above can close the cycle; the reservation is settled, so `closed` is this:
            if self.blocked is not None or fleet.free_total == 0:
                self._defer_rest_from(ordered, position + 1, None)
                return

    def _walk_settled(self, ordered: Sequence[QueuedTask], start: int, columns: WalkColumns) -> None:
        """`_walk_over_columns`, whose deferrals name no task: their ids are the kept queue's own, those of its
        positions from `start` on but the ones granted meanwhile (`_ids_from_columns`); then, if the walk closed
        the cycle before the end, the rest deferred cheaply (`_defer_rest_from`)."""
        kept, granted = len(self.deferred_ids), len(self.grants)
        stop = self._walk_over_columns(ordered, start, columns)
        self._ids_from_columns(columns.task_ids, start, stop, kept, granted)
        if stop < len(ordered):
            self._defer_rest_from(ordered, stop, columns)

    def _ids_from_columns(self, task_ids: list[str], start: int, end: int, kept: int, granted: int) -> None:
        """Make the deferred ids after the first `kept` those of the kept queue's positions start..end-1 (`task_ids`)
        but the tasks of the grants after the first `granted`: every task of the walk is granted or deferred, once,
        in queue order (ids are unique), so these are the deferred tasks in their order — copied between the
        grants' positions. The ids said on the way (`defer`, in the calls the walk makes) are dropped."""
        ids = self.deferred_ids
        del ids[kept:]
        position = start
        for grant in self.grants[granted:]:
            at = task_ids.index(grant.task_id, position, end)
            ids += task_ids[position:at]
            position = at + 1
        ids += task_ids[position:end]
        assert len(ids) == len(self.deferred_reasons), "a settled walk deferred a task twice or not at all"

    def _walk_over_columns(self, ordered: Sequence[QueuedTask], start: int, columns: WalkColumns) -> int:
        """The walk from `start` on, the reservation settled, as `walk` does it — but the readiness failure
        of a task is read from its flags (`columns.flags`), and a task whose shape (GPUs, heavy, card types:
        `columns.shapes`) already found no room since the last grant or preemption on one of its card types,
        and whose quota allows all its card options, is deferred with that shape's NO_CAPACITY sentence (a
        core task unless it may preempt). Exact: it is `_consider_usable`'s cheap case — a shape's room check
        (`_may_start` without preemption), once failed, fails for the rest of the cycle (free capacity only
        shrinks and the failure caches only tighten), and it and its sentence read only the pools of the
        shape's card types, which only grants and preemptions there change (`_changes_on`). Other tasks
        are `_consider_usable(task, task.options)` inline: a repeated failure (`_repeat_failure`'s rule, keyed
        by `_walk_shape`) said from the columns, else `_attempt`. A task is read only
        when the columns cannot decide it: its quota may not allow all its options (`QuotaBook.allows_longest`
        from its longest runtime; a refusal kept for its project and shape, `QuotaBook.refusals`, answers first), its shape may have room, or it is a core task whose preemption may help.
        Only those calls can close the cycle (`closed`), so it is checked after them, not before each task; once
        closed the walk stops. Returns where it stopped (the position after the last task it decided). The
        deferrals' ids are not said here (`_walk_settled` says them)."""
        fleet, limited, quota, explain = self.fleet, self._limited, self.quota, self.explain
        flags, projects, shapes = columns.flags, columns.projects, columns.shapes
        submitted, longest, shape_table, runtimes = columns.submitted, columns.longest, columns.shape_table, columns.runtimes
        failures = readiness_failures(self.policy)  # by flags
        longest_bounds, refusals, no_bounds, margin = quota.longest_bounds, quota.refusals, {}, self.policy.quota_expiry_margin_s
        # Per shape number (lists indexed by it, read without a call; the shape table does not grow during a plan):
        no_room: list[list | None] = [None] * len(shape_table)  # [`_changes()` when checked, the sentence, `_changes_on` then]
        rooms: list[tuple[int, bool] | None] = [None] * len(shape_table)  # (`fleet.version` then, `fleet.may_have_room`)
        helps: dict[int, tuple[int, bool]] = {}  # shape -> (victim index version then, `_preemption_may_help`)
        add_reason, add_detail = self.deferred_reasons.append, self.deferred_details.append  # the ids: `_walk_settled`
        no_capacity, repeats, grace_bits = R.NO_CAPACITY, self._repeats, columns.grace_bits
        now, preemption, grace_s = self.now, self.policy.preemption, self.policy.preempt_after_s
        settles_s = self._settles_after_s  # a core task's failure is a shape's from this wait on (`_past_grace_since`)
        hol = self.policy.head_of_line_blocking
        # not closed at `start` (`walk` checked); the columns read in one pass, not indexed per task: over slices of
        # them (a copy each, in C) rather than `islice`s, whose every step costs another call (−0.9% instructions)
        for position, task_flags, shape, project in zip(range(start, len(ordered)), flags[start:], shapes[start:],
                                                        projects[start:]):
            failure = failures[task_flags]
            if failure is None and project in limited:
                # what refused earlier tasks since the project's last charge (as in `_walk_settled_tasks`, kept inline)
                refused = refusals.get(project)
                if refused is not None and (refusal := refused.get(shape)) is not None and (
                        failure := refusal.of(runtimes[position])) is not None:
                    add_reason(failure[0])
                    add_detail(failure[1])
                    continue
                gpus, _, card_types = shape_table[shape]
                longest_s, bound = longest[position], longest_bounds.get(project, no_bounds).get(shape)
                if bound is None:  # not yet asked since the project's last charge
                    allowed = quota.allows_longest(project, shape, card_types, gpus, longest_s)
                else:  # `allows_longest` with its kept bound, inlined: this runs for every task with a quota
                    allowed = not (bound[0] < longest_s + margin or bound[1] < gpus * longest_s / SECONDS_PER_HOUR)
                if not allowed:
                    usable, failure = quota.usable_indexes(project, card_types, gpus, runtimes[position], shape)
                    if failure is None and len(usable) < len(card_types):  # some of its options
                        task = ordered[position]
                        self._consider_usable(task, tuple([task.options[index] for index in usable]))
                        failure = _CONSIDERED
            if failure is not None:
                if failure is not _CONSIDERED:
                    add_reason(failure[0])
                    add_detail(failure[1])
                    continue
            else:
                changes = self.changes
                known = no_room[shape]
                still = known is not None and (known[0] == changes or self._still_no_room(known, shape_table[shape][2], changes))
                if known is not None:  # its room check failed before: it fails for the rest of the cycle (only its
                    has_room = False  # sentence may not hold, unless `still`)
                else:
                    room = rooms[shape]
                    if room is None or room[0] != fleet.version:
                        room = rooms[shape] = (fleet.version, fleet.may_have_room(*shape_table[shape]))
                    has_room = room[1]
                if not has_room:  # `_may_start` unless a core task may preempt (`_core_may_help`)
                    if not task_flags & CORE:
                        may_preempt = False
                    elif preemption and now >= submitted[position] + grace_s and (victims := self._victims) is not None \
                            and (helped := helps.get(shape)) is not None and helped[0] == victims.version:
                        may_preempt = helped[1]  # `_core_may_help`'s common case, inline: ~25k core tasks per plan ask it
                    else:
                        may_preempt = self._core_may_help(submitted[position], shape, shape_table[shape], helps)
                    if not may_preempt:
                        add_reason(no_capacity)
                        if still:
                            add_detail(known[1])
                        else:
                            text = explain.no_capacity_of(shape_table[shape])  # the task is not read: its shape says it
                            add_detail(text)
                            no_room[shape] = [changes, text, self._changes_on_types(shape_table[shape][2])]
                        continue
                # `_may_start` holds (room, or preemption may help): `_consider_usable(task, task.options)`, whose
                # shape is `_walk_shape` (from the columns) and whose repeated failure (`_repeat_failure`'s rule) is
                # said from them too — most tasks with room end here, unread
                walk_shape = None
                if not task_flags & CORE or not preemption or now >= submitted[position] + settles_s:  # `_past_grace_since`
                    card_types, task_runtimes = shape_table[shape][2], runtimes[position]
                    walk_shape = self._walk_shape(task_flags, shape, card_types, task_runtimes, grace_bits[position])
                    remembered = repeats.get(walk_shape)
                    if remembered is not None and (remembered[4] == self.changes
                                                   or self._unchanged_since(remembered, card_types)):
                        add_reason(remembered[1])  # [stamp, reason, sentence or None: behind the reservation, index, changes]
                        add_detail(remembered[2] if remembered[2] is not None
                                   else self._behind_reservation(task_runtimes[remembered[3]]))
                        continue
                task = ordered[position]
                if walk_shape is not None and not has_room and not hol and self._preemption_fails_again(task):
                    # `_attempt`'s outcome, unattempted (`_no_room_again`): ~1,100 core tasks per plan in the
                    # core-heavy variant, whose remembered failure each grant on H100 makes stale
                    self._no_room_again(walk_shape, shape_table[shape], card_types)
                    continue
                self._attempt(task, task.options, walk_shape)
            # Only the calls above can close the cycle; the reservation is settled, so `closed` is this:
            if self.blocked is not None or fleet.free_total == 0:
                return position + 1
        return len(ordered)

    def _no_room_again(self, walk_shape: tuple, shape: tuple[int, bool, tuple[str, ...]],
                       card_types: Sequence[str]) -> None:
        """Defer a core task past its grace as `_attempt` would when it has no room on any card type (all in the
        fleet: `Fleet.may_have_room` false) and its preemption fails again (`_preemption_fails_again`), and remember
        the failure for its `walk_shape` as `_remember_failure` would. Such an attempt changes nothing (but the
        guard's failure cache, which answers alike either way): the placement fails at its failure caches or free
        totals; each miss is NO_CAPACITY (neither behind the reservation nor a heavy spread: no node takes it even
        light), so the deferral is `never_fits`'s sentence or the capacity sentence of all its card types —
        `no_capacity_of(shape)`; no grace is mentioned past the grace (no head-of-line blocking: the caller checked)."""
        text = self.explain.no_capacity_of(shape)
        self.deferred_reasons.append(R.NO_CAPACITY)
        self.deferred_details.append(text)
        self._remember_said(walk_shape, self._changes_on_types(card_types))

    def _still_no_room(self, known: list, card_types: Sequence[str], changes: int) -> bool:
        """True if a shape's room check failed (`_walk_settled`'s [`_changes()` then, the sentence, `_changes_on`
        its options then]) and no grant or preemption touched its card types since: it fails alike and its
        sentence holds (it reads only those card types' pools). Marks it checked at `changes`."""
        if known[2] != self._changes_on_types(card_types):
            return False
        known[0] = changes
        return True

    def _core_may_help(self, submitted_at: float, shape: int, described: tuple[int, bool, tuple[str, ...]],
                       helps: dict[int, tuple[int, bool]]) -> bool:
        """`_may_preempt_since(submitted_at) and _shape_may_preempt(shape, described, helps)` for a core task of the
        settled walk, their common cases answered here: past the grace (no revisit to ask) and the shape's answer kept
        for the victim index's version (`_victims`, built by the first `_shape_may_preempt`)."""
        if not ((self.policy.preemption and self.now >= submitted_at + self.policy.preempt_after_s)
                or self._may_preempt_since(submitted_at)):
            return False
        victims, known = self._victims, helps.get(shape)
        if victims is not None and known is not None and known[0] == victims.version:
            return known[1]
        return self._shape_may_preempt(shape, described, helps)
