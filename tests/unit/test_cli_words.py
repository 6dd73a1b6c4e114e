"""Every words table of the CLI and of `cardflow up --demo` (a module-level dict keyed by `CliLang`: of
sentences, or one sentence) says the same things in English and Chinese: the same keys and, in each sentence, the same `{placeholders}`."""

from __future__ import annotations

import importlib
import pkgutil
import string

import pytest

import services.cli
import services.demo
from services.cli.lang import CliLang


def _tables() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    found, seen = [], set()
    for package in (services.cli, services.demo):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                if isinstance(value, dict) and set(value) == set(CliLang) and id(value) not in seen:
                    seen.add(id(value))  # once, where it is defined or first imported
                    english, chinese = value[CliLang.EN], value[CliLang.ZH]
                    if isinstance(english, str):  # one sentence per language
                        english, chinese = {"": english}, {"": chinese}
                    found.append((f"{module.__name__}.{name}", english, chinese))
    return found


def _fields(sentence: object) -> set[str]:
    if not isinstance(sentence, str):
        return set()
    return {field for _, field, _, _ in string.Formatter().parse(sentence) if field}


TABLES = _tables()


def test_the_cli_has_words_tables() -> None:
    assert len(TABLES) >= 5, [name for name, _, _ in TABLES]


@pytest.mark.parametrize(("name", "english", "chinese"), TABLES, ids=[name for name, _, _ in TABLES])
def test_both_languages_have_every_sentence_with_the_same_placeholders(name: str, english: dict, chinese: dict) -> None:
    assert set(english) == set(chinese), f"{name}: only English {set(english) - set(chinese)}, only Chinese {set(chinese) - set(english)}"
    differ = {key: (_fields(english[key]), _fields(chinese[key])) for key in english if _fields(english[key]) != _fields(chinese[key])}
    assert not differ, f"{name}: placeholders differ {differ}"
