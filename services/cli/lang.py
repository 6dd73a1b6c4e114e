"""The CLI's language option: `--lang zh` or `CARDFLOW_LANG=zh` prints tables and answers in Chinese.

    def command(lang: LangOption = CliLang.EN) -> None: ...
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class CliLang(StrEnum):
    EN = "en"
    ZH = "zh"


LangOption = Annotated[CliLang, typer.Option("--lang", envvar="CARDFLOW_LANG", help="language of the output: en or zh")]
