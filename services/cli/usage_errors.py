"""Click's usage errors (a missing argument, an unknown option or command, a bad value) told in Chinese.

`cardflow … --lang zh` or `CARDFLOW_LANG=zh` asks for Chinese before click has parsed anything, so the
root command (`LocalisedGroup`) reads the language from the raw arguments and the environment
(`requested_lang`). In English nothing changes: typer prints click's own message. In Chinese each
usage error is told from its structured fields (`usage_error_text`): which argument or option, the
close matches click found; a value's own complaint comes from the parameter's type in English and is
shown as it is, marked 原文, as the CLI marks every English sentence it passes on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from difflib import get_close_matches
from typing import Any

import typer
from typer.core import TyperGroup

from services.cli.lang import CliLang

LANG_OPTION = "--lang"
LANG_ENV = "CARDFLOW_LANG"

PARAM_KINDS_ZH = {"argument": "参数", "option": "选项", "parameter": "参数"}
"""click's `param_type_name` in Chinese."""

ClickException: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
"""The click exception base typer raises. Typer ≥ 0.23 carries its own copy of click in a private
module, older ones use click itself: the public `typer.BadParameter` leads to the right one either way.
Error kinds are told apart by class name (`_kinds`) for the same reason."""


def requested_lang(args: Sequence[str], environ: Any = os.environ) -> CliLang:
    """The language the command line asks for before parsing: the last `--lang X` / `--lang=X`, else
    `CARDFLOW_LANG`; English when neither names a known language."""
    chosen = environ.get(LANG_ENV, "")
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == LANG_OPTION and index + 1 < len(args):
            chosen = args[index + 1]
        elif arg.startswith(LANG_OPTION + "="):
            chosen = arg.split("=", 1)[1]
    return CliLang.ZH if chosen == CliLang.ZH.value else CliLang.EN


def _kinds(error: Exception) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def usage_error_text(error: Any) -> str:
    """The error's message in Chinese, built from its fields; click's English kept as 原文 where only it says more."""
    kinds = _kinds(error)
    if getattr(error, UNKNOWN_COMMAND, None):
        return f"没有这个命令：{getattr(error, UNKNOWN_COMMAND)}" + _close_matches(getattr(error, CLOSE_MATCHES, None))
    if "MissingParameter" in kinds:
        return _missing(error)
    if "BadParameter" in kinds:
        return f"{_hint(error) or '参数'} 的值无效（原文：{error.message}）"
    if "NoSuchOption" in kinds:
        return f"没有这个选项：{error.option_name}" + _close_matches(error.possibilities)
    if "BadOptionUsage" in kinds:
        return f"选项 {error.option_name} 用法有误（原文：{error.message}）"
    if "BadArgumentUsage" in kinds:
        return f"参数用法有误（原文：{error.message}）"
    if "FileError" in kinds:
        return f"无法打开文件 {error.ui_filename}（原文：{error.message}）"
    if "UsageError" in kinds:
        return f"用法有误（原文：{error.message}）"
    return f"出错了（原文：{error.format_message()}）"


UNKNOWN_COMMAND = "cardflow_unknown_command"
"""Attribute `LocalisedGroup.resolve_command` sets on click's "No such command" error: the name typed."""
CLOSE_MATCHES = "cardflow_close_matches"
"""... and the commands whose names are close to it."""


def _missing(error: Any) -> str:
    kind = error.param_type or (error.param.param_type_name if error.param is not None else "parameter")
    return f"缺少{PARAM_KINDS_ZH.get(kind, kind)} {_hint(error)}".rstrip()


def _hint(error: Any) -> str:
    """The parameter as the user types it: an option's flags, an argument's name (quoted as click quotes them)."""
    hint: Any = error.param_hint
    if hint is None and error.param is not None:
        param = error.param
        hint = list(param.opts) if param.param_type_name == "option" and param.opts else param.name
    if not hint:
        return ""
    names = hint if isinstance(hint, (list, tuple)) else [hint]
    return " / ".join(name if name.startswith("'") else f"'{name}'" for name in names)


def _close_matches(possibilities: Sequence[str] | None) -> str:
    return f"。是否想用：{'、'.join(possibilities)}" if possibilities else ""


def show_usage_error_zh(error: Any) -> None:
    """Print the error as typer would (usage, where to find help, the message in a panel), in Chinese."""
    from rich.console import Console
    from rich.panel import Panel

    console = Console(stderr=True)
    ctx: Any = getattr(error, "ctx", None)
    if "NoArgsIsHelpError" in _kinds(error):
        console.print(error.format_message(), markup=False, highlight=False)  # the help text itself
        return
    if ctx is not None:
        console.print(ctx.get_usage().replace("Usage:", "用法：", 1), markup=False, highlight=False)
        console.print(f"运行 '{ctx.command_path} --help' 查看帮助。", markup=False, style="dim")
    console.print(Panel(usage_error_text(error), border_style="red", title="错误", title_align="left"))


class LocalisedGroup(TyperGroup):
    """The root command: in Chinese, click's usage errors are told by `show_usage_error_zh`; otherwise typer's own."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As typer's, and an unknown command's error carries the name typed and the close matches (`usage_error_text`)."""
        try:
            return super().resolve_command(ctx, args)
        except ClickException as error:
            if args and self.get_command(ctx, args[0]) is None:
                setattr(error, UNKNOWN_COMMAND, args[0])
                setattr(error, CLOSE_MATCHES, get_close_matches(args[0], list(self.commands)))
            raise

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:  # fmt: skip
        arguments = list(sys.argv[1:] if args is None else args)
        if not standalone_mode or requested_lang(arguments) is CliLang.EN:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            outcome = super().main(arguments, prog_name, complete_var, standalone_mode=False, **extra)
        except ClickException as error:
            show_usage_error_zh(error)
            sys.exit(error.exit_code)
        except typer.Abort:
            print("已中止。", file=sys.stderr)
            sys.exit(1)
        # not standalone, click returns the command's value, or an exit code raised as typer.Exit
        sys.exit(outcome if isinstance(outcome, int) and not isinstance(outcome, bool) else 0)
