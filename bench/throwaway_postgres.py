"""The `main()` of a bench that measures on PostgreSQL alone: print the load, start throwaway embedded backends
in a temporary directory, run the measuring coroutine on their PostgreSQL, and remove them.

    from bench.throwaway_postgres import run_on_embedded_postgres
    run_on_embedded_postgres(measure, parser.parse_args())    # measure(args, database_url)

Scripts put the repository's root first on `sys.path` so that `bench.*` imports (`bench/` is no package). Not
named `embedded_postgres`: a script's own folder comes first on `sys.path`, and that name would hide the
package of the embedded PostgreSQL server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from shared.embedded import Backends
from shared.settings import Settings


def run_on_embedded_postgres(measure: Callable[[argparse.Namespace, str], Awaitable[None]],
                             args: argparse.Namespace) -> None:  # fmt: skip
    """Print the load, start throwaway embedded backends in a temporary directory and run `measure` on their
    PostgreSQL (its URL)."""
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="cardflow-bench-") as tmp:
        Path(tmp).chmod(0o711)
        with Backends(Settings(), Path(tmp), durable=False) as endpoints:
            asyncio.run(measure(args, endpoints.database_url))
