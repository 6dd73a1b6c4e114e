"""Shell completion is on: `cardflow --install-completion` / `--show-completion`, and completing works."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from services.cli.main import app


def complete(words: str) -> list[str]:
    env = {"_CARDFLOW_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    result = CliRunner().invoke(app, [], env=env, prog_name="cardflow")
    assert result.exit_code == 0, result.output
    return result.output.split()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_is_offered_for_common_shells(shell: str) -> None:
    result = CliRunner().invoke(app, ["--show-completion", shell], prog_name="cardflow")

    assert result.exit_code == 0
    assert "_CARDFLOW_COMPLETE" in result.output


def test_commands_and_options_complete() -> None:
    assert complete("cardflow serv") == ["service"]
    assert "--sim" in complete("cardflow agent --s")
