"""structlog, configured once: JSON lines off a TTY, a readable console on a TTY.

Tracebacks are plain text on the console too: structlog's default (rich, with every frame's
locals) renders a large local for seconds, and a loop that logs an exception at each retry then
spends its event loop drawing tracebacks (seen in CI: an outbox relay's retries starved a whole
in-process system for minutes). Processes that never call `configure_logging` get structlog's
defaults, so entry points and the test session call it first.

Per-message context (event_id, type, subject, correlation_id) is bound with
`bind_message_context`, which uses contextvars so concurrent handlers do not mix.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_configured = False

# Libraries whose INFO lines are per-request chatter (httpx logs every request it sends: the
# console health probe of `cardflow up` printed one line per poll); their warnings still show.
CHATTY_LIBRARY_LOGGERS = ("httpx", "httpcore", "botocore", "aiobotocore")

SECRET_KEYS = frozenset({"password", "secret", "secret_key", "access_key", "token", "database_url"})


def _drop_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key in list(event_dict):
        if key.lower() in SECRET_KEYS:
            event_dict[key] = "***"
    return event_dict


class _CurrentStderr:
    """`sys.stderr` as it is at each write, not as it was at configuration: test runners (typer's
    CliRunner) swap it for a buffer they close afterwards."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog and stdlib logging once per process; later calls are no-ops."""
    global _configured
    if _configured:
        return
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer: Any = (structlog.processors.JSONRenderer() if as_json
                     else structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _drop_secrets,
            structlog.processors.format_exc_info if as_json else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=level.upper(), stream=_CurrentStderr(), format="%(name)s %(levelname)s %(message)s")
    for name in CHATTY_LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelNamesMapping()[level.upper()]))
    _configured = True


def bind_message_context(**context: Any) -> None:
    """Bind per-message fields (event_id, type, subject, correlation_id) for this task's logs."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**{k: v for k, v in context.items() if v is not None})


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
