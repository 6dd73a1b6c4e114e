"""How long one `plan()` takes at fleet scale, and how that grows with nodes and queue length.

Run: `.venv/bin/python bench/scale.py` (or `make bench`). Prints a rich table and rewrites the
section between `<!-- scale:start -->` and `<!-- scale:end -->` of docs/BENCHMARKS.md (other
sections of that file belong to other benchmarks and are kept).
`bench/scale.py --digest` prints a sha256 of every decision of the headline's cold plan and its steady
cycles (kept and list queue): two checkouts that print the same digest decide those cycles alike.
`bench/scale.py --headline [--json OUT] [--repeats N] [--breakdown]` times only the headline case (best
of N, default 5), prints it with the machine's load average, and writes `{"ms": ..., "nodes": ...,
"queued": ..., "list_ms": ..., "kept_build_ms": ..., "steady_*": ...}` to OUT (`headline_record`); `--breakdown`
also prints where the time goes (phases, the floor of the contract, a sampling profile); the docs are not
touched. The headline case is 10,000 nodes x 8 GPUs with 100,000 queued tasks; target: under 200 ms per plan.

Each case's first plan is timed three ways (`FirstPlans`). `ms`, the one the target is judged on, is the first
plan() over kept inputs: the 100,000 tasks as an `OrderedQueue` and the fleet as a `KeptSnapshot`, both made
beforehand and not timed in it — the dispatcher and the simulator never plan over a list, they keep both between
cycles, so this is what a leader pays in its heaviest cycle (every grant of the fleet's free GPUs, every
deferral). `list_ms` is the same plan over the tasks in a list and a plain snapshot (the queue sorted afresh: what
`ms` was until session 18); `kept_build_ms` is `OrderedQueue.of` + `KeptSnapshot.of` of those inputs, what a new
leader pays once when it loads them. `steady_ms` / `steady_max_ms` are the median / slowest timed steady cycle
over the kept queue. If the headline misses the target, the section also gets the phases of one headline plan
(over kept inputs), the floor of the contract over a list (what a plan() that orders the whole queue and returns
a deferral per waiting task — as the columns of `Deferrals` — pays before deciding anything), a sampling
profile and a cProfile summary.

The parts live in modules of their own: the constants and the inputs (`bench/scale_inputs.py`: the workload,
synthetic and seeded), the timings, steady cycles and digest (`bench/scale_timing.py`: only `plan()` is timed, best
of several runs after a warm-up), the breakdown (`bench/scale_breakdown.py`) and the docs section
(`bench/scale_doc.py`). This module is the command line; it also names what `bench/scale_ab.py` and the tests read
from it (`headline_inputs`, `POLICIES`, `NOW`, `next_cycle`, `plan`, `KeptSnapshot`, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from statistics import median

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_breakdown import (  # noqa: E402,F401  (contract_floor, phase_times: read by the tests)
    contract_floor,
    phase_times,
    print_breakdown,
    profile_headline,
    sample_headline,
)
from bench.scale_doc import DOC, cases_table, write_doc  # noqa: E402
from bench.scale_inputs import (  # noqa: E402,F401  (NOW, CYCLE_S, the builders: read by scale_ab and the tests)
    CHURN,
    CYCLE_S,
    GPUS_PER_NODE,
    HEADLINE,
    NODE_SERIES,
    NOW,
    QUEUE_SERIES,
    TARGET_MS,
    WARM_CYCLES,
    Case,
    build_queue,
    build_snapshot,
    headline_inputs,
    inputs_of,
    kept_inputs,
)
from bench.scale_timing import (  # noqa: E402,F401  (next_cycle, plans_digest: read by scale_ab and the tests)
    FirstPlans,
    SteadyCycle,
    next_cycle,
    plans_digest,
    steady_cycles,
    time_plan,
)
from shared.scheduling.kept_snapshot import KeptSnapshot  # noqa: E402,F401  (scale_ab plans over a kept snapshot if named)
from shared.scheduling.ordered_queue import OrderedQueue  # noqa: E402,F401
from shared.scheduling.ordering import order_queue  # noqa: E402,F401
from shared.scheduling.plan import plan  # noqa: E402,F401
from shared.scheduling.policies import POLICIES  # noqa: E402


def headline_only(json_out: Path | None, repeats: int, breakdown: bool = False) -> None:
    """Time the headline case alone; print it and the load; maybe write the JSON; with `breakdown`,
    also where the time goes (phases over kept inputs, the contract's floor over a list, a sampling profile)."""
    console = Console()
    before = os.getloadavg()[0]
    first = time_plan(Case(*HEADLINE), repeats)
    nodes, queued = HEADLINE
    console.print(f"headline: the first plan() on {nodes:,} nodes x {GPUS_PER_NODE} GPUs, {queued:,} queued, over kept "
                  f"inputs (OrderedQueue, KeptSnapshot): [bold]{first.kept_ms:.0f} ms[/] (best of {repeats}, CPU time; "
                  f"{first.granted:,} granted, {first.fillers:,} of them standard fillers; target {TARGET_MS:.0f} ms; 1-minute load average {before:.1f} before, "
                  f"{os.getloadavg()[0]:.1f} after); over a list and a plain snapshot {first.list_ms:.0f} ms; making the "
                  f"kept inputs (OrderedQueue.of + KeptSnapshot.of, once per leader) {first.kept_build_ms:.0f} ms")
    steady = steady_cycles(*headline_inputs())
    kept, fresh = median([row.kept_ms for row in steady]), median([row.fresh_ms for row in steady])
    console.print(f"steady: {len(steady)} cycles after {WARM_CYCLES} (each: the last plan's grants start, {CHURN} "
                  f"leases end, {CHURN} tasks arrive, {CYCLE_S:.0f} s later), median plan() {kept:.0f} ms with the "
                  f"queue kept sorted, {fresh:.0f} ms sorting the same tasks afresh; per cycle (kept / fresh / update "
                  "ms, grants (fillers), every task walked): " + "; ".join(
                      f"{row.kept_ms:.0f} / {row.fresh_ms:.0f} / {row.update_ms:.0f}, {row.granted} ({row.fillers}), "
                      f"{'yes' if row.full_walk else 'no'}" for row in steady))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(headline_record(first, steady)) + "\n")
        console.print(f"wrote {json_out}")
    if breakdown:
        snapshot, queue = headline_inputs()
        kept_queue, kept_snapshot = kept_inputs(snapshot, queue, POLICIES["cardflow"])
        print_breakdown(console, phase_times(kept_snapshot, kept_queue), contract_floor(snapshot, queue),
                        sample_headline(kept_snapshot, kept_queue))


def headline_record(first: FirstPlans, steady: list[SteadyCycle]) -> dict:
    """What `--headline --json` writes: `ms`, the first plan over kept inputs (what the target is judged on);
    `list_ms`, the same plan over a list and a plain snapshot; `kept_build_ms`, making the kept inputs; the
    steady cycles' median over the kept queue and afresh, the slowest over the kept queue (`steady_max_ms`),
    their count and the churn per cycle."""
    nodes, queued = HEADLINE
    return {"ms": round(first.kept_ms, 1), "nodes": nodes, "queued": queued,
            "list_ms": round(first.list_ms, 1), "kept_build_ms": round(first.kept_build_ms, 1),
            "steady_ms": round(median([row.kept_ms for row in steady]), 1),
            "steady_fresh_ms": round(median([row.fresh_ms for row in steady]), 1),
            "steady_max_ms": round(max(row.kept_ms for row in steady), 1), "steady_cycles": len(steady), "churn": CHURN}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--headline", action="store_true", help="time only the headline case (docs untouched)")
    parser.add_argument("--json", type=Path, dest="json_out", help="with --headline: write {ms, list_ms, kept_build_ms, nodes, queued, steady_*} here")
    parser.add_argument("--repeats", type=int, default=5, help="with --headline: best of this many timed plans")
    parser.add_argument("--breakdown", action="store_true",
                        help="with --headline: also print phases, the contract's floor and a sampling profile")
    parser.add_argument("--digest", action="store_true",
                        help="print a sha256 of the headline's cold plan and steady cycles' plans (kept and list), nothing else")
    args = parser.parse_args()
    if args.digest:
        print(plans_digest(*headline_inputs()))
        return
    if (args.json_out is not None or args.breakdown) and not args.headline:
        parser.error("--json and --breakdown need --headline")
    if args.headline:
        headline_only(args.json_out, max(1, args.repeats), args.breakdown)
    else:
        run()


def run() -> None:
    console = Console()
    cases = [Case(nodes, HEADLINE[1]) for nodes in NODE_SERIES]
    cases += [Case(HEADLINE[0], queue) for queue in QUEUE_SERIES if queue != HEADLINE[1]]
    cases += [Case(*HEADLINE, policy=name) for name in POLICIES if name != "cardflow"]
    rows = []
    # No spinner (`console.status`) while timing: its refresh thread's CPU counts in the process's CPU time.
    console.print("timing plan()…")
    for case in cases:
        rows.append((case, time_plan(case)))
    table = cases_table(rows)
    console.print(table)
    console.print("timing steady cycles…")
    steady = steady_cycles(*headline_inputs())
    headline = next(first for case, first in rows if (case.nodes, case.queue) == HEADLINE and case.policy == "cardflow")
    phases, profile, shares, floor = [], "", [], []
    if headline.kept_ms >= TARGET_MS:
        snapshot, queue = headline_inputs()
        kept_queue, kept_snapshot = kept_inputs(snapshot, queue, POLICIES["cardflow"])
        phases, floor = phase_times(kept_snapshot, kept_queue), contract_floor(snapshot, queue)
        profile, shares = profile_headline(kept_snapshot, kept_queue), sample_headline(kept_snapshot, kept_queue)
        console.print(f"[yellow]headline {headline.kept_ms:.0f} ms misses the {TARGET_MS:.0f} ms target; where the time goes:")
        print_breakdown(console, phases, floor, shares)
        console.print(profile, markup=False, highlight=False)
    write_doc(rows, headline, phases, profile, shares, floor, steady)
    console.print(f"wrote the scale section of {DOC}")


if __name__ == "__main__":
    main()
