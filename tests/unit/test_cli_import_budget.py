"""The CLI's start-up budget, guarded without timing: `cardflow --help` and the read-only commands
must not import the servers' and backends' code (bench/cli_startup.py measures the seconds).

Each case runs the real `cardflow` app in a fresh interpreter against an API address where nothing
listens (the command fails after one refused connection, as fast as it can) and reports every
module it imported.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("asyncpg", "faststream", "aiobotocore", "botocore", "redis", "matplotlib", "structlog", "uvloop", "fastapi",
         "uvicorn", "jinja2", "shared.settings", "shared.embedded.backends", "shared.delivery", "services.common")  # fmt: skip
"""Never imported to print help or to read through the API."""
HELP_ALSO = ("shared.events", "httpx", "services.console")
"""Not even these for help (typer itself may import pydantic for its type adapters)."""

RUN = """
import json, sys
from services.cli.main import app
try:
    app(sys.argv[2:], prog_name="cardflow")
except SystemExit:
    pass
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def imported_by(args: list[str], tmp_path: Path) -> set[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # closed again: connections are refused
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARDFLOW_")}
    env |= {"CARDFLOW_API_URL": url, "CARDFLOW_TOKEN": "cfk_budget", "CARDFLOW_DATA_DIR": str(tmp_path / "none")}
    report = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", RUN, str(report), *args], cwd=REPO, env=env, capture_output=True, timeout=120, check=False)
    return set(json.loads(report.read_text()))


def heavy_in(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if any(m == name or m.startswith(name + ".") for m in modules))


@pytest.mark.parametrize("args", [["--help"], ["tasks", "--help"], ["up", "--help"], ["hold", "--help"]], ids=" ".join)
def test_help_imports_only_typer_and_rich(args: list[str], tmp_path: Path) -> None:
    modules = imported_by(args, tmp_path)
    assert "typer" in modules  # the app ran
    assert heavy_in(modules, HEAVY + HELP_ALSO) == []


@pytest.mark.parametrize("args", [["tasks"], ["tasks", "--state", "no card fits", "--since", "2d"], ["status", "T-NONE"],
                                  ["nodes"], ["ledger"], ["board"], ["deadletter", "list"], ["whoami"]], ids=" ".join)  # fmt: skip
def test_read_only_commands_import_no_backend_or_server_code(args: list[str], tmp_path: Path) -> None:
    modules = imported_by(args, tmp_path)
    assert "httpx" in modules  # it reached the API client
    assert heavy_in(modules, HEAVY) == []
