"""`settle_after_start_up`: start-up objects frozen, young collections less often (in a child
process, so the test process keeps its own collector settings)."""

from __future__ import annotations

import json
import subprocess
import sys

from services.common.process_gc import YOUNG_THRESHOLD

CHILD = """
import gc, json
from services.common.process_gc import settle_after_start_up
before = {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}
settle_after_start_up()
print(json.dumps({"before": before, "after": {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}}))
"""


def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    seen = json.loads(out)
    assert seen["before"]["frozen"] == 0
    assert seen["after"]["frozen"] > 1_000  # the modules, classes and functions imported so far
    assert seen["after"]["threshold"] == [YOUNG_THRESHOLD, *seen["before"]["threshold"][1:]]


def test_the_service_command_settles_the_collector_after_importing_the_service() -> None:
    import inspect

    from services.cli import service

    source = inspect.getsource(service.run_until_signalled)
    assert source.index("load_spec(name)") < source.index("settle_after_start_up()") < source.index("run_service(")


def test_the_agent_command_settles_the_collector_too() -> None:
    import inspect

    from services.cli import agent

    source = inspect.getsource(agent)
    assert source.index("build_daemon(options") < source.index("settle_after_start_up()") < source.index("run_until_signalled(daemon)")
