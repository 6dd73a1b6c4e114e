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


def test_a_console_traceback_is_plain_text_without_frame_locals(
    fresh_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # structlog's default (rich, with every frame's locals) spent seconds per traceback on large
    # locals, and a relay logging each retry starved a whole in-process system in CI
    cardflow_logging.configure_logging("INFO", json=False)
    huge_local = list(range(1000))
    try:
        raise RuntimeError(f"broken after {len(huge_local)} items")
    except RuntimeError:
        cardflow_logging.get_logger("test").exception("relay failed")
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: broken after 1000 items" in err
    assert "0, 1, 2, 3" not in err and "╭" not in err  # no locals, no rich panel
