"""`cardflow service NAME`: run one service process until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import importlib
import signal

import typer

SERVICES: dict[str, str] = {
    "config": "services.config.service:SPEC",
    "intake": "services.intake.service:SPEC",
    "readiness": "services.readiness.service:SPEC",
    "matcher": "services.matcher.service:SPEC",
    "dispatcher": "services.dispatcher.service:SPEC",
    "ledger": "services.ledger.service:SPEC",
    "views": "services.console.projector:SPEC",
    "gate": "services.gate.service:SPEC",
}
"""Service name -> `module:attribute` of its `ServiceSpec` (imported only when run)."""


def load_spec(name: str):  # -> ServiceSpec (import kept lazy so the CLI starts fast)
    if name not in SERVICES:
        raise typer.BadParameter(f"unknown service {name!r}; choose one of: {', '.join(SERVICES)}")
    module_name, attribute = SERVICES[name].split(":")
    return getattr(importlib.import_module(module_name), attribute)


async def run_until_signalled(name: str) -> None:
    from services.common.process_gc import settle_after_start_up
    from services.common.runtime import run_service
    from shared.settings import get_settings

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    spec = load_spec(name)
    settle_after_start_up()  # the service's modules are imported: freeze them, collect less often
    await run_service(spec, get_settings(), stop)


def register(app: typer.Typer) -> None:
    @app.command("service")
    def service(name: str = typer.Argument(..., help=f"one of: {', '.join(SERVICES)}")) -> None:
        """Run one cardflow service (connects to CARDFLOW_REDIS_URL / CARDFLOW_DATABASE_URL)."""
        import uvloop

        from shared.logging import configure_logging

        configure_logging()
        uvloop.run(run_until_signalled(name))  # libuv's event loop: less CPU per I/O callback than asyncio's
