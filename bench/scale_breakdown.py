"""Where the scale benchmark's headline plan spends its time: the phases of `plan()` (`phase_times`), the floor of
the contract over a list (`contract_floor`), a cProfile summary and a sampling profile; `print_breakdown` prints
them.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import re
import signal
import sys
from operator import attrgetter
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_inputs import CLOCK, NOW  # noqa: E402
from shared.scheduling.cycle import Cycle  # noqa: E402
from shared.scheduling.model import DeferralReason, Deferrals, QueuedTask, Snapshot  # noqa: E402
from shared.scheduling.ordering import order_queue, walk_order  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402
from shared.scheduling.queue_columns import WalkColumns  # noqa: E402


def phase_times(snapshot: Snapshot, queue) -> list[tuple[str, float]]:
    """Milliseconds per phase of one headline plan (over these inputs: a list, or a kept queue and snapshot),
    replaying plan()'s recipe step by step. The walk (`Cycle.walk`, as plan() walks, with a kept queue's columns)
    is split at the task of the last grant: before it tasks still start, after it none does (once nothing can start
    any more, the rest is deferred cheaply within the second part)."""
    policy = POLICIES["cardflow"]
    granted = {grant.task_id for grant in plan(snapshot, queue, policy, NOW).grants}
    last_grant = max((index for index, task in enumerate(order_queue(queue, policy, NOW)) if task.task_id in granted),
                     default=-1)
    marks = []
    gc.disable()
    try:
        marks.append(CLOCK())
        ordered, columns = walk_order(queue, policy, NOW)
        marks.append(CLOCK())
        cycle = Cycle(snapshot, policy, NOW, ordered, columns)
        marks.append(CLOCK())
        head, rest = ordered[:last_grant + 1], ordered[last_grant + 1:]
        cycle.walk(head, columns)  # a prefix: its positions are the columns' own
        marks.append(CLOCK())
        cycle.walk(rest, _columns_from(columns, last_grant + 1))
        result = cycle.to_plan()
        marks.append(CLOCK())
    finally:
        gc.enable()
    gc.collect(0)  # the young-generation pass plan() pays once it re-enables the collector
    marks.append(CLOCK())
    del result
    labels = ["1. order the queue", "2. index free capacity",
              f"3a. decide {len(head):,} tasks, up to the last grant",
              f"3b. decide the other {len(rest):,} (none starts)", "4. young-generation GC afterwards"]
    return [(label, (end - begin) * 1000) for label, begin, end in zip(labels, marks, marks[1:])]


def _columns_from(columns: WalkColumns | None, start: int) -> WalkColumns | None:
    """A walk's columns from position `start` on (the whole-queue ones as they are)."""
    if columns is None:
        return None
    whole = {"core_gpus", "shape_table"}
    return WalkColumns(**{name: getattr(columns, name) if name in whole else getattr(columns, name)[start:]
                          for name in WalkColumns.__dataclass_fields__})


def contract_floor(snapshot: Snapshot, queue: list[QueuedTask]) -> list[tuple[str, float]]:
    """What any plan() that returns a deferral per waiting task (the columns of `Deferrals`) costs here,
    before deciding anything: order the queue, index the fleet, read each task in queue order (its
    readiness and card options, as every path of the walk does) and add its task id, reason and
    sentence to the columns, and the young-generation GC afterwards. Milliseconds, best of three."""
    policy = POLICIES["cardflow"]
    reason, card_type = DeferralReason.NO_CAPACITY, attrgetter("card_type")

    def one_pass(ordered: list[QueuedTask]) -> Deferrals:
        task_ids, reasons, details, gate = [], [], [], policy.readiness_gate
        add_id, add_reason, add_detail = task_ids.append, reasons.append, details.append
        for task in ordered:
            add_id(task.task_id)
            if (gate and not task.data_ready) or not task.options or not task.approved:
                add_reason(DeferralReason.DATA_NOT_READY)
                add_detail("not ready")
                continue
            shape = (task.gpus, task.heavy, tuple(map(card_type, task.options)))
            add_reason(reason)
            add_detail(shape[2][0])
        return Deferrals(tuple(task_ids), tuple(reasons), tuple(details))

    best = [float("inf")] * 4
    for _ in range(3):
        gc.collect()
        gc.disable()
        try:
            marks = [CLOCK()]
            ordered = order_queue(queue, policy, NOW)
            marks.append(CLOCK())
            Cycle(snapshot, policy, NOW, ordered)
            marks.append(CLOCK())
            made = one_pass(ordered)
            marks.append(CLOCK())
        finally:
            gc.enable()
        gc.collect(0)
        marks.append(CLOCK())
        del made
        best = [min(value, (end - begin) * 1000) for value, begin, end in zip(best, marks, marks[1:])]
    labels = ["order the queue", "index free capacity (a Cycle)",
              f"read each of {len(queue):,} tasks in queue order, its deferral into columns",
              "young-generation GC afterwards"]
    return list(zip(labels, best))


def profile_headline(snapshot: Snapshot, queue: list[QueuedTask], top: int = 15) -> str:
    """A cProfile summary (cumulative time, scheduling-core functions) of one headline plan()."""
    profiler = cProfile.Profile()
    profiler.enable()
    plan(snapshot, queue, POLICIES["cardflow"], NOW)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(r"shared/scheduling", top)
    text = re.sub(r"\S*/shared/scheduling/", "", out.getvalue())
    return text[text.find("   ncalls"):].rstrip() if "   ncalls" in text else text


def sample_headline(snapshot: Snapshot, queue: list[QueuedTask], plans: int = 5, interval_s: float = 0.0005,
                    top: int = 22) -> list[tuple[str, float]]:
    """Where one headline plan() spends its CPU time, by sampling: every `interval_s` of CPU (SIGPROF)
    the running call stack is recorded; a function's share is the share of samples it is on the stack
    (inclusive, so shares add up to more than 100%). Unlike cProfile, sampling does not slow the
    many small calls down more than the few large ones. Scheduling-core functions only."""
    policy = POLICIES["cardflow"]
    on_stack: dict[str, int] = {}
    samples = 0

    def record(_signum, frame) -> None:
        nonlocal samples
        samples += 1
        seen = set()
        while frame is not None:
            path = frame.f_code.co_filename
            if "/shared/scheduling/" in path:
                seen.add(f"{path.rsplit('/', 1)[-1]}:{frame.f_code.co_qualname}")
            frame = frame.f_back
        for name in seen:
            on_stack[name] = on_stack.get(name, 0) + 1

    previous = signal.signal(signal.SIGPROF, record)
    signal.setitimer(signal.ITIMER_PROF, interval_s, interval_s)
    try:
        for _ in range(plans):
            plan(snapshot, queue, policy, NOW)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, previous)
    ranked = sorted(on_stack.items(), key=lambda item: -item[1])[:top]
    return [(name, 100.0 * count / max(1, samples)) for name, count in ranked]


def print_breakdown(console: Console, phases: list[tuple[str, float]], floor: list[tuple[str, float]],
                    shares: list[tuple[str, float]]) -> None:
    lines = [f"  {label:62s} {millis:7.1f} ms" for label, millis in phases]
    lines.append("  the least a plan() over a list returning a deferral per waiting task pays here, deciding nothing:")
    lines += [f"    {label:60s} {millis:7.1f} ms" for label, millis in floor]
    lines.append(f"    {'together':60s} {sum(millis for _, millis in floor):7.1f} ms")
    lines += [f"  {name:62s} {share:5.1f} % of samples" for name, share in shares]
    console.print("\n".join(lines), soft_wrap=True, markup=False, highlight=False)

