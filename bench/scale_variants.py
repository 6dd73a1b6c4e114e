"""The headline of the scale benchmark and one-field variants of it: is `plan()` within 200 ms on workloads it was not
tuned on (issue 10 item 3)?

Run: `.venv/bin/python bench/scale_variants.py [--repeats N] [--doc]`. Each variant is the headline's fleet and queue
(`bench/scale_inputs.py`) with ONE field of some queued tasks changed (`VARIANTS`: which tasks, which field); the
fleet is the same. Per variant it times the first `plan()` over kept inputs (`OrderedQueue`, `KeptSnapshot`, made
beforehand: what `bench/scale.py --headline` times), best and median of N (default 5) after a warm-up, as CPU time of
the process, the variants interleaved round by round so a load shift hits them alike; it prints a rich table with the
1-minute load average before and after. `--doc` also rewrites the section between `<!-- scale-variants:start -->` and
`<!-- scale-variants:end -->` of docs/BENCHMARKS.md (generated; every other section kept).
`--digest` prints a sha256 of every decision per variant (`plans_digest`: the cold plan and the steady cycles, kept
and list): two checkouts that print the same digests decide the variants alike.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_inputs import CLOCK, HEADLINE, NOW, TARGET_MS, headline_inputs, kept_inputs  # noqa: E402
from bench.scale_timing import fillers_of, plans_digest  # noqa: E402
from shared.scheduling.model import PriorityClass, QueuedTask  # noqa: E402
from shared.scheduling.plan import plan  # noqa: E402
from shared.scheduling.policies import POLICIES  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
START, END = "<!-- scale-variants:start -->", "<!-- scale-variants:end -->"
_OPPORTUNISTIC = PriorityClass.OPPORTUNISTIC


@dataclass(frozen=True)
class Variant:
    """The headline with one field of the tasks `applies` picks changed by `change`."""

    name: str
    what: str  # the change, in words
    applies: Callable[[QueuedTask], bool]
    change: Callable[[QueuedTask], QueuedTask]

    def queue(self, queue: list[QueuedTask]) -> list[QueuedTask]:
        return [self.change(task) if self.applies(task) else task for task in queue]


def _is_opportunistic(task: QueuedTask) -> bool:
    return task.priority_class == _OPPORTUNISTIC


def _made(name: str) -> Callable[[QueuedTask], QueuedTask]:
    """The task made of the class called `name`, a member of the task's own `PriorityClass` (`bench/scale_ab.py`
    applies these variants to another checkout's tasks, whose enum is another class)."""
    return lambda task: replace(task, priority_class=type(task.priority_class)[name])


VARIANTS = (
    Variant("headline", "as `bench/scale.py --headline` (20% core, 50% standard, 30% opportunistic)",
            lambda task: False, lambda task: task),
    Variant("no opportunistic work", "every opportunistic task made standard (20% core, 80% standard)",
            _is_opportunistic, _made("STANDARD")),
    Variant("core-heavy", "every opportunistic task made core (50% core, 50% standard)",
            _is_opportunistic, _made("CORE")),
    Variant("no task checkpoints", "no queued task checkpoints (the workload before session 22b)",
            lambda task: task.checkpoint_interval_s is not None, lambda task: replace(task, checkpoint_interval_s=None)),
    Variant("opportunistic data not ready", "every opportunistic task's data not ready",
            _is_opportunistic, lambda task: replace(task, data_ready=False)),
    Variant("opportunistic work 16 GPUs wide", "every opportunistic task asks for 16 GPUs (more than a node holds)",
            _is_opportunistic, lambda task: replace(task, gpus=16)),
)


@dataclass(frozen=True)
class VariantTiming:
    variant: Variant
    best_ms: float
    median_ms: float
    granted: int
    fillers: int


def time_variants(variants=VARIANTS, repeats: int = 5) -> list[VariantTiming]:
    """Each variant's first plan over kept inputs: best and median of `repeats` after a warm-up, one round of every
    variant after another (interleaved, so the machine's load shifts hit each alike)."""
    snapshot, queue = headline_inputs()
    policy = POLICIES["cardflow"]
    inputs, decided = [], []
    for variant in variants:
        kept_queue, kept_snapshot = kept_inputs(snapshot, variant.queue(queue), policy)
        inputs.append((kept_snapshot, kept_queue))
        decided.append(plan(kept_snapshot, kept_queue, policy, NOW))  # warm-up, and what it decides
    times: list[list[float]] = [[] for _ in variants]
    for _ in range(repeats):
        for (kept_snapshot, kept_queue), millis in zip(inputs, times):
            started = CLOCK()
            plan(kept_snapshot, kept_queue, policy, NOW)
            millis.append((CLOCK() - started) * 1000)
    return [VariantTiming(variant, min(millis), median(millis), len(result.grants), fillers_of(result))
            for variant, millis, result in zip(variants, times, decided)]


def variants_digests(variants=VARIANTS) -> list[tuple[str, str]]:
    """(name, `plans_digest`) per variant: the cold plan and the steady cycles of its inputs, kept and list."""
    snapshot, queue = headline_inputs()
    return [(variant.name, plans_digest(snapshot, variant.queue(queue))) for variant in variants]


_COLUMNS = ("variant", "what changed", "granted", "fillers", "best ms", "median ms", "best / headline's best",
            "within 200 ms")


def _cells(row: VariantTiming, headline_ms: float) -> list[str]:
    """A row's cells; `headline_ms`, the headline's best in the same run (the ratio holds better than the ms when
    the machine's load moves)."""
    return [row.variant.name, row.variant.what, f"{row.granted:,}", f"{row.fillers:,}", f"{row.best_ms:.1f}",
            f"{row.median_ms:.1f}", f"{row.best_ms / headline_ms:.2f}" if headline_ms else "",
            "yes" if row.best_ms < TARGET_MS else "**no**"]


def _headline_ms(rows: list[VariantTiming]) -> float:
    return next((row.best_ms for row in rows if row.variant.name == "headline"), 0.0)


def variants_table(rows: list[VariantTiming], repeats: int) -> Table:
    table = Table(title=f"the first plan() over kept inputs per variant, CPU time (best / median of {repeats})")
    for column in _COLUMNS:
        table.add_column(column, justify="left" if column in ("variant", "what changed") else "right")
    for row in rows:
        table.add_row(*[cell.replace("**", "") for cell in _cells(row, _headline_ms(rows))])
    return table


def write_doc(rows: list[VariantTiming], repeats: int, loads: tuple[float, float], commit: str) -> None:
    """Rewrite the variants' section of docs/BENCHMARKS.md, keeping every other section."""
    nodes, queued = HEADLINE
    lines = [START, "### Scale: the headline and one-field variants of it (generated by `bench/scale_variants.py --doc`)",
             "", f"The headline's fleet ({nodes:,} nodes x 8 GPUs) and queue ({queued:,} tasks), each variant with ONE "
             "field of some queued tasks changed; the first `plan()` over kept inputs, best / median of "
             f"{repeats} after a warm-up, CPU time of the process, the variants interleaved round by round; commit "
             f"{commit}, 1-minute load average {loads[0]:.1f} before, {loads[1]:.1f} after (shared 2-core machine: "
             "compare only rows of one run). Target: under 200 ms.", "",
             "| " + " | ".join(_COLUMNS) + " |", "|---|---|" + "---:|" * (len(_COLUMNS) - 2)]
    lines += ["| " + " | ".join(_cells(row, _headline_ms(rows))) + " |" for row in rows]
    lines.append(END)
    _replace_section("\n".join(lines))


def _replace_section(section: str) -> None:
    text = DOC.read_text()
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:  # first time: right after the generated scale section
        text = text.replace("<!-- scale:end -->", "<!-- scale:end -->\n\n" + section, 1)
    DOC.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="best / median of this many timed plans per variant")
    parser.add_argument("--doc", action="store_true", help="also rewrite the variants' section of docs/BENCHMARKS.md")
    parser.add_argument("--digest", action="store_true", help="print a digest of every decision per variant, nothing else")
    parser.add_argument("--only", nargs="*", help="only the variants with these names")
    args = parser.parse_args()
    chosen = tuple(variant for variant in VARIANTS if not args.only or variant.name in args.only)
    if args.digest:
        for name, digest in variants_digests(chosen):
            print(f"{digest}  {name}")
        return
    console = Console(width=max(Console().width, 160))
    before = os.getloadavg()[0]
    rows = time_variants(chosen, max(1, args.repeats))
    loads = (before, os.getloadavg()[0])
    console.print(variants_table(rows, args.repeats))
    console.print(f"1-minute load average {loads[0]:.1f} before, {loads[1]:.1f} after")
    if args.doc:
        from bench.scale_doc import _commit
        write_doc(rows, args.repeats, loads, _commit())
        console.print(f"wrote the variants' section of {DOC}")


if __name__ == "__main__":
    main()
