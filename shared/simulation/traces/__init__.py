"""Trace importers: each turns one trace format into a `Trace` of `TraceTask`s.

Formats: `native` (cardflow's own CSV), `philly` (Microsoft Philly jobs), `openb` (Alibaba GPU 2023
pod + node lists), `sacct` (Slurm `sacct -P` output). See docs/traces.md for every mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from shared.simulation.traces.native import load_native
from shared.simulation.traces.openb import load_openb
from shared.simulation.traces.philly import load_philly
from shared.simulation.traces.sacct import load_sacct
from shared.simulation.workload import Trace

LOADERS: dict[str, Callable[[Path], Trace]] = {
    "native": load_native,
    "philly": load_philly,
    "openb": load_openb,
    "sacct": load_sacct,
}


def load_trace(path: str | Path, fmt: str = "native") -> Trace:
    """Read `path` with the importer for `fmt`; raises ValueError for an unknown format."""
    try:
        loader = LOADERS[fmt]
    except KeyError:
        raise ValueError(f"unknown trace format {fmt!r}; choose one of {', '.join(LOADERS)}") from None
    return loader(Path(path))


__all__ = ["LOADERS", "load_trace", "load_native", "load_philly", "load_openb", "load_sacct"]
