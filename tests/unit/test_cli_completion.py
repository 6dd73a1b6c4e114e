"""Shell completion is on: `cardflow --install-completion` / `--show-completion`, and completing works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app


def complete(words: str) -> list[str]:
    env = {"_CARDFLOW_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
    result = CliRunner().invoke(app, [], env=env, prog_name="cardflow")
    assert result.exit_code == 0, result.output
    return result.output.split()


def test_the_completion_script_is_offered_to_a_bash_user() -> None:
    """Typer detects the shell from the parent process (`--show-completion` takes no shell name when
    shellingham is installed), so the command runs under bash, as a user's `cardflow --show-completion` would."""
    cardflow = Path(sys.executable).parent / "cardflow"  # the console script `pip install` made
    # "; exit $?": bash runs a lone command by exec, and the parent would be whoever started pytest
    shown = subprocess.run(["bash", "-c", f"{cardflow} --show-completion; exit $?"],
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    assert shown.returncode == 0, shown.stderr
    assert "_CARDFLOW_COMPLETE=complete_bash" in shown.stdout


def test_commands_and_options_complete() -> None:
    assert complete("cardflow serv") == ["service"]
    assert "--sim" in complete("cardflow agent --s")
