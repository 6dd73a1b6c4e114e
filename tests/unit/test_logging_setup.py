"""Logging set-up: per-request library chatter stays out of an operator's terminal."""

from __future__ import annotations

import logging

import pytest

from shared import logging as cardflow_logging


@pytest.fixture
def fresh_logging(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cardflow_logging, "_configured", False)
    saved = {name: logging.getLogger(name).level for name in cardflow_logging.CHATTY_LIBRARY_LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_httpx_request_lines_are_hidden_at_info_but_its_warnings_show(fresh_logging: None) -> None:
    cardflow_logging.configure_logging("INFO", json=True)
    httpx_logger = logging.getLogger("httpx")
    assert not httpx_logger.isEnabledFor(logging.INFO)
    assert httpx_logger.isEnabledFor(logging.WARNING)


def test_an_error_level_run_keeps_library_warnings_quiet_too(fresh_logging: None) -> None:
    cardflow_logging.configure_logging("ERROR", json=True)
    assert not logging.getLogger("httpcore").isEnabledFor(logging.WARNING)
    assert logging.getLogger("httpcore").isEnabledFor(logging.ERROR)
