"""How long `cardflow` takes to start: `--help` and read-only commands (issue 16's goal: under 1 s).

Each command runs as a fresh process (`.venv/bin/cardflow ...`) `--runs` times; the table shows the
median and the best wall time, and the CPU time of the process (user + system, from
`os.wait4`: robust when the machine is shared). Read-only commands are API clients: they run against
a console address where nothing listens, so the time is start-up (imports, argument parsing, settings)
plus one refused connection — what a user waits for before the first byte from the API.

    .venv/bin/python bench/cli_startup.py [--runs 7] [--no-doc]

Writes the `cli-startup` section of docs/BENCHMARKS.md (other sections are kept), with the machine
and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "BENCHMARKS.md"
START, END = "<!-- cli-startup:start -->", "<!-- cli-startup:end -->"
GOAL_S = 1.0
COMMANDS = (
    ("--help",),
    ("tasks", "--help"),
    ("tasks",),
    ("status", "T-NONE"),
    ("nodes",),
    ("ledger",),
    ("deadletter", "list"),
    ("whoami",),
)


def unused_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed again: connections are refused


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, _, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def measure(runs: int) -> list[tuple[str, float, float, float]]:
    executable = shutil.which("cardflow", path=str(REPO / ".venv" / "bin")) or "cardflow"
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_API_URL": unused_url(), "CARDFLOW_TOKEN": "cfk_benchmark", "CARDFLOW_DATA_DIR": "/nonexistent"}
    rows = []
    for command in COMMANDS:
        samples = [time_once([executable, *command], env) for _ in range(runs)]
        walls, cpus = [wall for wall, _ in samples], [cpu for _, cpu in samples]
        rows.append((" ".join(command), statistics.median(walls), min(walls), statistics.median(cpus)))
        print(f"cardflow {' '.join(command):24s} median {rows[-1][1]:.2f} s  best {rows[-1][2]:.2f} s  cpu {rows[-1][3]:.2f} s")
    return rows


def render(rows: list[tuple[str, float, float, float]], runs: int) -> str:
    load = os.getloadavg()[0]
    lines = [
        "## CLI start-up",
        "",
        f"`.venv/bin/python bench/cli_startup.py --runs {runs}` on CPython {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPU(s) (1-minute load average {load:.1f} when written). Each "
        "command is a fresh process; read-only commands call an API address where nothing listens (start-up plus "
        f"one refused connection). Goal: under {GOAL_S:g} s.",
        "",
        "| command | median wall s | best wall s | median CPU s | CPU under 1 s |",
        "|---|---:|---:|---:|---|",
        *(f"| `cardflow {name}` | {median:.2f} | {best:.2f} | {cpu:.2f} | {'yes' if cpu < GOAL_S else 'no'} |"
          for name, median, best, cpu in rows),
        "",
        "CPU time is the fair figure on a shared machine (wall time includes waiting for a core).",
    ]
    return "\n".join(lines)


def write_doc(section: str) -> None:
    block = f"{START}\n{section}\n{END}"
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if START in text and END in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-doc", action="store_true", help="do not rewrite docs/BENCHMARKS.md")
    args = parser.parse_args()
    rows = measure(args.runs)
    if not args.no_doc:
        write_doc(render(rows, args.runs))
        print("wrote the cli-startup section of docs/BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
