"""The console's read endpoints beyond tasks (one router module per area) and the board snapshot."""

from __future__ import annotations

from fastapi import APIRouter

from services.console.routes import (
    alerts,
    approvals,
    audit,
    board,
    check,
    config,
    deadletters,
    exports,
    fleet,
    ledger,
    nodes,
    operator,
    quota_changes,
    rounds,
    series,
    story,
    task_lookup,
)

routes_router = APIRouter(prefix="/v1")
for module in (alerts, approvals, board, check, config, deadletters, exports, fleet, ledger, nodes, operator, quota_changes,
               series, story, audit, rounds, task_lookup):
    routes_router.include_router(module.router)
