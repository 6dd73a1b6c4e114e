"""Every backticked code name in a README resolves to real code (docs are code).

A README that names a function, class, module or file that no longer exists is a bug. Each
`backticked` span outside fenced blocks is read as one of:

- a path (`sql/001_dispatcher.sql`, `shared/projection.py`, `tests/unit/intake/`): it exists next
  to the README, from the repository's root, or as the tail of a path in the repository (a bare
  data-file name such as `cards.yaml` or `board.zh.html` may name an object in a bucket and is not
  checked);
- `package.module:NAME` or a dotted import path (`shared.cards.rank_cards`): it imports;
- `module.name` / `Class.name` (`fencing.check_claim`, `Dispatcher.write_step`): some module file of
  that name defines `name`, or some class of that name has it;
- a CamelCase name (`WorkingSet`): a class, function or constant defined in the code;
- an environment variable (`CARDFLOW_DISPATCHER_TICK_S`): a settings field under a known prefix, or
  a literal in the code;
- any other name (`queued`, `end_reason`, `lease.released`, `dispatcher.tasks`): a word the code
  or its SQL uses (identifiers, string literals, table and column names, event types).

Spans with spaces, placeholders or patterns (`cardflow up`, `<id>`, `CARDFLOW_DISPATCHER_*`) are prose
and are not checked. Call forms are checked by their name (`plan()` -> `plan`).
"""

from __future__ import annotations

import ast
import importlib
import keyword
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("services", "shared", "bench", "tests")
READMES = sorted(p for p in [ROOT / "README.md", *ROOT.glob("*/README.md"), *ROOT.glob("*/*/README.md")]
                 if ".venv" not in p.parts and p.exists())
_SPAN = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_PROSE = re.compile(r"[\s<>*{}\[\]|$@,'\"]|^-|://|^\.|\.\.\.")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"^_?[A-Z][a-z0-9]+[A-Z]?[A-Za-z0-9]*$")
_ENV = re.compile(r"^CARDFLOW_[A-Z0-9_]+$")
_SQL_WORDS = {"NULL", "TRUE", "FALSE", "JSON"}


def spans(readme: Path) -> list[str]:
    text = _FENCE.sub("", readme.read_text())
    return sorted({span.strip() for span in _SPAN.findall(text)} - {""})


@cache
def code_files() -> tuple[Path, ...]:
    this = Path(__file__).resolve()
    return tuple(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts and p != this)


@cache
def vocabulary() -> tuple[frozenset[str], frozenset[str], dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """(names defined, every word the code and SQL use, names defined per module stem, attributes per class)."""
    defined: set[str] = set()
    words: set[str] = set()
    modules: dict[str, set[str]] = {}
    classes: dict[str, set[str]] = {}
    for path in code_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        module = modules.setdefault(path.stem, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
                words.add(node.name)
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, set()).update(_members(node))
            elif isinstance(node, ast.Name):
                words.add(node.id)
            elif isinstance(node, ast.Attribute):
                words.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                words.add(node.arg)
            elif isinstance(node, ast.arg):
                words.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
                words.update(_IDENTIFIER.findall(node.value))
                words.add(node.value)
        for node in tree.body:
            module.update(_assigned(node))
        defined.update(module)
    words |= sql_words()
    return (frozenset(defined), frozenset(words), {k: frozenset(v) for k, v in modules.items()},
            {k: frozenset(v) for k, v in classes.items()})


@cache
def config_texts() -> tuple[str, ...]:
    """Deployment files, where settings are also spelled out."""
    names = ("*.yaml", "*.yml", "*.env", "Dockerfile", "Makefile")
    return tuple(p.read_text() for pattern in names for p in ROOT.rglob(pattern) if ".venv" not in p.parts)


@cache
def sql_words() -> frozenset[str]:
    """Schema, table and column names (and every other word) of the SQL migrations."""
    files = [*ROOT.glob("services/*/sql/*.sql"), *ROOT.glob("shared/*/sql/*.sql")]
    return frozenset(word for sql in files for word in _IDENTIFIER.findall(sql.read_text()))


def _assigned(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.ImportFrom):
        return {alias.asname or alias.name for alias in node.names}
    return set()


def _members(cls: ast.ClassDef) -> set[str]:
    members = set().union(*(_assigned(node) for node in cls.body))
    members |= {t.attr for node in ast.walk(cls) if isinstance(node, ast.Assign | ast.AnnAssign)
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Attribute)}  # self.x = ...
    return members


def unresolved(span: str, readme: Path) -> str | None:
    """None when `span` is prose or resolves; else why it does not."""
    name = re.sub(r"\(.*\)$", "", span).split("=", 1)[0]
    if not name or _PROSE.search(name) or name.startswith("/") or keyword.iskeyword(name) or name in _SQL_WORDS:
        return None
    if _is_path(name, readme):
        return None if _file_exists(name, readme) else f"no file {name}"
    if _DATA_FILE.search(name):
        return None  # a document's name (`cards.yaml`), perhaps in a bucket
    if ":" in name:
        module, _, attr = name.partition(":")
        if module.split(".")[0] in ("shared", "services", "bench"):
            return None if _imports(module, attr) else f"{name} does not import"
        return None  # a stream or key name (`cf:events`)
    defined, words, modules, classes = vocabulary()
    if _ENV.match(name):
        return None if _env_known(name) else f"no setting or literal {name}"
    parts = name.split(".")
    if not all(_IDENTIFIER.fullmatch(p) for p in parts) or name in message_types():
        return None
    if len(parts) == 1:
        if _CAMEL.match(name):
            return None if name in defined else f"nothing named {name} is defined"
        if "_" not in name.strip("_"):
            return None  # a plain word: a state, a table, a value
        return None if name in words or name in dir(__builtins__) else f"no code uses {name}"
    head, *rest = parts
    if head in ("shared", "services", "bench") and len(parts) > 1:
        return None if _imports(".".join(parts[:-1]), parts[-1]) or _imports(name) else f"{name} does not import"
    if head in classes:
        return None if rest[0] in classes[head] else f"class {head} has no {rest[0]}"
    if head in modules:  # a module's function, or else a table's column (`leader.epoch`)
        if rest[0] in modules[head] or all(p in sql_words() for p in parts):
            return None
        return f"module {head} has no {rest[0]}"
    if _CAMEL.match(head) and head not in defined:
        return f"nothing named {head} is defined"
    return None if all(p in words for p in parts) else f"no code uses {name}"


_CODE_FILE = re.compile(r"\.(py|sql|md)$")
_DATA_FILE = re.compile(r"\.(yaml|yml|json|toml|env|txt|csv|html|css|js|svg)$")


def _is_path(name: str, readme: Path) -> bool:
    """A code file's name, a data file's path (a bare `cards.yaml` may name a document in a bucket),
    or a path whose first segment is a directory next to the README or at the root."""
    if _CODE_FILE.search(name) or (_DATA_FILE.search(name) and "/" in name):
        return True
    first = name.split("/", 1)[0]
    return "/" in name and ((readme.parent / first).is_dir() or (ROOT / first).is_dir())


def _file_exists(name: str, readme: Path) -> bool:
    if (readme.parent / name).exists() or (ROOT / name).exists():
        return True
    suffix = "/" + name.rstrip("/")
    return any(path.endswith(suffix) for path in repo_files())


@cache
def repo_files() -> tuple[str, ...]:
    skip = {".venv", ".git", "node_modules", "__pycache__", ".cardflow"}
    return tuple(str(p) for p in ROOT.rglob("*") if not skip.intersection(p.relative_to(ROOT).parts))


@cache
def message_types() -> frozenset[str]:
    from shared.events.catalog import MESSAGE_TYPES  # noqa: PLC0415

    return frozenset(MESSAGE_TYPES)


def _imports(module: str, attr: str | None = None) -> bool:
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return False
    return attr is None or hasattr(imported, attr)


def _env_known(name: str) -> bool:
    _, words, _, _ = vocabulary()
    if name in words or any(name in text for text in config_texts()):
        return True
    prefixes = [w for w in words if w.startswith("CARDFLOW_") and w.endswith("_")]
    return any(name.startswith(p) and name[len(p):].lower() in words for p in prefixes)


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_backticked_code_name_in_a_readme_resolves(readme: Path) -> None:
    problems = [f"`{span}`: {why}" for span in spans(readme) if (why := unresolved(span, readme))]
    assert problems == [], f"{readme.relative_to(ROOT)} names code that does not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "span",
    ["EventBatch", "ReportStep.finish", "persist._deferral_changes", "Dispatcher.writing", "NoSuchClass",
     "services/dispatcher/cycle.py", "shared.leasing.no_such_rule", "services.dispatcher.service:NOPE",
     "CARDFLOW_DISPATCHER_NO_SUCH_KNOB"],
)
def test_the_check_catches_names_that_do_not_exist(span: str) -> None:
    assert unresolved(span, ROOT / "services" / "dispatcher" / "README.md") is not None


@pytest.mark.parametrize(
    "span",
    ["apply_reports", "WorkingSet", "Dispatcher.write_step", "fencing.check_claim", "sql/001_dispatcher.sql",
     "services.dispatcher.service:SPEC", "shared.leasing.report_fold", "lease.released", "dispatcher.tasks",
     "CARDFLOW_DISPATCHER_TICK_S", "plan()", "queued", "cardflow service dispatcher", "cf:events"],
)
def test_real_names_and_prose_pass(span: str) -> None:
    assert unresolved(span, ROOT / "services" / "dispatcher" / "README.md") is None
