"""Sustained submit -> lease -> done throughput of the whole system, beside a raw Redis stream round trip.

Run: `.venv/bin/python bench/pipeline.py` (options: `--help`). It starts embedded backends (or uses
the `CARDFLOW_*` ones), then in one run:

1. measures a raw redis-py stream round trip on the same Redis: XADD (pipelined) -> XREADGROUP ->
   XACK, messages/s and per-message latency — the ceiling any Redis-Streams pipeline lives under;
2. starts every service as a process (`cardflow service NAME`) and a fleet of simulated agents
   (default 50 x H100x8, all in one worker process: `python bench/pipeline.py fleet ...`), waits for
   every node to register;
3. for each offered rate: submits short one-GPU tasks through `cf:ingest` at that rate for
   `--duration` seconds, follows `cf:events`, and waits until every task ended; reports throughput
   (tasks done per second of wall time, and in the steady second half of the window), submit -> lease
   latency (XADD -> `lease.granted`), the lag of each stage from the event timestamps, and the CPU
   each process used;
4. writes the section between `<!-- pipeline:start -->` and `<!-- pipeline:end -->` of
   docs/BENCHMARKS.md (other sections are kept), with the machine and the exact command; `--json OUT`
   also writes, per offered rate, `{"offered", "throughput", "steady", "p50_ms", "p99_ms",
   "cpu_ms_per_task", ...}` (a list `rates`) and the run's `raw_redis_msgs_per_s`.

`--profile NAMES` runs those processes (comma-separated services, `fleet`, or `all`) under cProfile
and adds, per process, where its time went by kind of code (`bench.profile_shares`) and its top
functions to the output.

`--pg-stats` starts PostgreSQL with `pg_stat_statements` and prints, per phase and per task, the time
and calls of each normalised statement (by the role, i.e. service, that ran it), commits, and rows
written per schema and table (`bench.pipeline_pgstats`); `--json` then holds them too (`pg_stats`).
The extension costs PostgreSQL some CPU itself: compare CPU per task only between runs without it.

`--deliveries` counts, per task, the phase's events by type, deliveries by stream and consumer group, appends by stream,
and outbox/inbox rows by schema (`bench.pipeline_deliveries`; read 5 s after the last task ended, after
the CPU window); `--json` then holds them too (`deliveries`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pipeline_parts import Fleet, PipelineBench, measure_raw_round_trip, run_fleet_worker  # noqa: E402
from bench.pipeline_deliveries import delivery_counts_json, print_delivery_counts  # noqa: E402
from bench.pipeline_pgstats import pg_stats_json, print_pg_stats  # noqa: E402
from bench.pipeline_report import summary, write_doc  # noqa: E402

READING = (
    "How to read it: *throughput* = tasks done / (last done - first sent); *steady* = tasks done per second "
    "in the second half of the send window. Stage lags come from each event's `occurred_at` (when its owner "
    "committed it) and from stream entry ids (when it landed on `cf:events`, an agent inbox or `cf:reports`); "
    "a stage that waits for a busy process shows its queue, not its work. CPU is user + system time of each "
    "process and its children during the phase; *fleet* is the simulated agents (on GPU hosts in production). "
    "Everything shares the machine's cores with the embedded servers, so CPU per task sets the ceiling."
)

TASK = {"project": "bench", "priority_class": "standard", "gpus": 1, "estimate_gpu_hours": 0.01, "profile": "compute"}
"""One short task: 36 GPU-seconds on the reference card, about 11 s on an H100."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    fleet = sub.add_parser("fleet", help="internal: run simulated agents in this process")
    fleet.add_argument("--agents", type=int, required=True)
    fleet.add_argument("--sim", default="H100x8")
    fleet.add_argument("--time-scale", type=float, required=True)
    fleet.add_argument("--heartbeat", type=float, default=2.0)
    parser.add_argument("--agents", type=int, default=50, help="simulated agents (nodes)")
    parser.add_argument("--sim", default="H100x8", help="each agent's GPUs, CARDxN")
    parser.add_argument("--rates", default="250,1000", help="offered submit rates (tasks/s), comma-separated")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of submitting per rate")
    parser.add_argument("--task-seconds", type=float, default=0.25, help="real seconds each task runs")
    parser.add_argument("--raw-messages", type=int, default=50_000, help="messages of the raw Redis round trip")
    parser.add_argument("--profile", type=_profiled, default=(), help="processes to run under cProfile: "
                        f"comma-separated, of {', '.join(PROFILABLE)}, or all")
    parser.add_argument("--pg-stats", action="store_true", help="run PostgreSQL with pg_stat_statements and print "
                        "where its time goes per task (statements, commits, rows written)")
    parser.add_argument("--deliveries", action="store_true", help="count, per task, events by type, deliveries by "
                        "stream and consumer group, and outbox/inbox rows by schema (bench.pipeline_deliveries)")
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/BENCHMARKS.md")
    parser.add_argument("--json", type=Path, help="also write the numbers per offered rate to this JSON file")
    parser.add_argument("--keep", type=Path, help="use (and keep) this data dir: logs of every process stay there")
    return parser.parse_args(argv)


PROFILABLE = ("intake", "readiness", "matcher", "dispatcher", "ledger", "views", "gate", "fleet")


def _profiled(text: str) -> tuple[str, ...]:
    names = PROFILABLE if text == "all" else tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(set(names) - set(PROFILABLE))
    if unknown:
        raise argparse.ArgumentTypeError(f"cannot profile {', '.join(unknown)}; choose from {', '.join(PROFILABLE)} or all")
    return names


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.mode == "fleet":
        import uvloop

        from services.common.process_gc import settle_after_start_up

        settle_after_start_up()  # as `cardflow agent` does
        uvloop.run(run_fleet_worker(args.agents, args.sim, args.time_scale, args.heartbeat))  # as the services run
        return
    from rich.console import Console

    console = Console()
    command = "python " + " ".join(shlex.quote(a) for a in ["bench/pipeline.py", *argv])
    with _data_dir(args.keep) as data_dir, PipelineBench(
        data_dir, Fleet(args.agents, args.sim), args.task_seconds, TASK, console, profile=args.profile,
        pg_stats=args.pg_stats, deliveries=args.deliveries,
    ) as bench:  # fmt: skip
        raw = asyncio.run(measure_raw_round_trip(bench.redis_url, args.raw_messages, console))
        bench.start_system()
        phases = [bench.run_phase(float(rate), args.duration) for rate in args.rates.split(",")]
        profile = bench.stop_and_profile()
    bench.print_results(raw, phases, profile)
    for result in bench.pg_stats_results:
        print_pg_stats(console, result)
    for counts in bench.delivery_results:
        print_delivery_counts(console, counts)
    if args.json is not None:
        numbers = summary(raw, phases, bench.describe())
        if bench.pg_stats_results:
            numbers["pg_stats"] = [pg_stats_json(result) for result in bench.pg_stats_results]
        if bench.delivery_results:
            numbers["deliveries"] = [delivery_counts_json(counts) for counts in bench.delivery_results]
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")
        console.print(f"wrote {args.json}")
    if not args.no_doc:
        write_doc(raw, phases, profile, bench.describe(), command, notes=READING)
        console.print("wrote the pipeline section of docs/BENCHMARKS.md")


@contextlib.contextmanager
def _data_dir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        keep.chmod(0o755)  # PostgreSQL's own user must reach its data dir inside
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="cardflow-bench-") as data_dir:
        Path(data_dir).chmod(0o755)
        yield Path(data_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
