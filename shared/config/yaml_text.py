"""Document text: parse, fingerprint, diff, edit in place, and render with comments.

A stored document is the operator's YAML text, comments included (the catalog's comments say
where each figure comes from): it is what `config show` prints, what the bucket holds and what
`config diff` compares. Edits (`set_values`) go through ruamel.yaml's round-trip mode, so they
change only the values named and keep every comment and the key order.

`config show` prints a first line `# cardflow: <name> version <N>`; `strip_version_header`
removes it again on apply and returns N, so `show > f; edit f; apply f` names its base version
without the operator typing it (a stale base is then refused: no lost update).
"""

from __future__ import annotations

import difflib
import hashlib
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError as RuamelYAMLError

from shared.submission import Problem
from shared.submission.validate import PlainYamlLoader

WHOLE_DOCUMENT = "(whole document)"
MAX_DOCUMENT_BYTES = 1_000_000
_HEADER = re.compile(r"^# cardflow: (?P<name>\S+) version (?P<version>\d+)[^\n]*\n?")


class DocumentTextError(ValueError):
    """Text that is not a YAML mapping, or an edit that cannot be applied; `.problems` says why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(problem) for problem in problems))


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def version_header(name: str, version: int) -> str:
    """The first line `config show` prints (a YAML comment: the document stays valid)."""
    return f"# cardflow: {name} version {version} (kept on apply as the base version; a stale base is refused)\n"


def strip_version_header(text: str) -> tuple[str, int | None]:
    """`text` without a leading `version_header` line, and the version it named (None if none)."""
    match = _HEADER.match(text)
    if match is None:
        return text, None
    return text[match.end():], int(match["version"])


def parse_yaml(text: str) -> dict[str, Any]:
    """The mapping a document's YAML holds (dates stay text, like submissions), or `DocumentTextError`."""
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise DocumentTextError([Problem(field=WHOLE_DOCUMENT, value=f"{len(text.encode())} bytes",
                                         expected=f"at most {MAX_DOCUMENT_BYTES} bytes")])
    try:
        data = yaml.load(text, Loader=PlainYamlLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise DocumentTextError([Problem(field=WHOLE_DOCUMENT, value=_excerpt(text), expected=f"valid YAML ({_one_line(error)})")]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DocumentTextError([Problem(field=WHOLE_DOCUMENT, value=_excerpt(text), expected="a YAML mapping (names mapped to values)")])
    return data


def unified_diff(old: str, new: str, name: str, old_label: str, new_label: str) -> str:
    """`diff -u` of two document texts ("" when they are equal)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"{name}@{old_label}", tofile=f"{name}@{new_label}",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


# ---- edits ----------------------------------------------------------------------------------------


def set_values(text: str, assignments: Sequence[str]) -> str:
    """`text` with each `key.path=value` applied (value read as YAML: `0.2`, `true`, `[A, B]`, `{H100: 0.2}`).

    Missing intermediate keys are created; comments and key order are kept. Every malformed
    assignment is reported at once.
    """
    parsed, problems = [], []
    for assignment in assignments:
        result = _parse_assignment(assignment)
        (problems if isinstance(result, Problem) else parsed).append(result)
    if problems:
        raise DocumentTextError(problems)
    tree = _round_trip_load(text)
    for path, value in parsed:
        _assign(tree, path, value)
    return _round_trip_dump(tree)


def _parse_assignment(assignment: str) -> tuple[list[str], Any] | Problem:
    path_text, sep, value_text = assignment.partition("=")
    path = [part.strip() for part in path_text.split(".")]
    if not sep or not all(path):
        return Problem(field=path_text or assignment, value=assignment,
                       expected="key.path=value, e.g. headroom.default=0.15 or preemption.enabled=false")
    try:
        value = yaml.load(value_text, Loader=PlainYamlLoader) if value_text.strip() else ""  # noqa: S506
    except yaml.YAMLError as error:
        return Problem(field=path_text, value=value_text, expected=f"a YAML value ({_one_line(error)})")
    return path, value


def _assign(tree: CommentedMap, path: list[str], value: Any) -> None:
    node: Any = tree
    for depth, key in enumerate(path[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = CommentedMap()
        elif not isinstance(child, Mapping):
            where = ".".join(path[: depth + 1])
            raise DocumentTextError([Problem(field=where, value=_plain(child), expected="a mapping to set keys in")])
        node = child
    node[path[-1]] = value


def _round_trip_load(text: str) -> CommentedMap:
    try:
        tree = YAML(typ="rt").load(text)
    except RuamelYAMLError as error:
        raise DocumentTextError([Problem(field=WHOLE_DOCUMENT, value=_excerpt(text), expected=f"valid YAML ({_one_line(error)})")]) from None
    if tree is None:
        return CommentedMap()
    if not isinstance(tree, CommentedMap):
        raise DocumentTextError([Problem(field=WHOLE_DOCUMENT, value=_excerpt(text), expected="a YAML mapping")])
    return tree


def _represent_null(representer: Any, _: None) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def _round_trip_dump(tree: CommentedMap) -> str:
    out = io.StringIO()
    dumper = YAML(typ="rt")
    dumper.width = 120
    # `null` as the seeded documents write it (ruamel's default is an empty value: a diff would show
    # `max_lost_gpu_hours: null` -> `max_lost_gpu_hours:` for a change that touched another key)
    dumper.representer.add_representer(type(None), _represent_null)
    dumper.indent(mapping=2, sequence=4, offset=2)
    dumper.dump(tree, out)
    return out.getvalue()


# ---- rendering a model with its field descriptions as comments -----------------------------------


def render_commented(model: BaseModel, header: Iterable[str] = ()) -> str:
    """A model as YAML, each field preceded by its description as a comment (for seeded documents)."""
    lines = [f"# {line}".rstrip() for line in header]
    _render_model(model, 0, lines)
    return "\n".join(lines).rstrip() + "\n"


def _render_model(model: BaseModel, indent: int, lines: list[str]) -> None:
    pad = " " * indent
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if info.description:
            lines.append(f"{pad}# {info.description}")
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            _render_model(value, indent + 2, lines)
            if indent == 0:
                lines.append("")
        else:
            lines.append(f"{pad}{name}: {_flow(value)}")


def _flow(value: Any) -> str:
    """One YAML flow value (`0.1`, `true`, `cardflow`, `{H100: 0.25}`)."""
    plain = _plain(value)
    return yaml.safe_dump(plain, default_flow_style=True, width=10_000, allow_unicode=True).removesuffix("\n...\n").strip()


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):  # e.g. a list of alert sinks
        return _plain(value.model_dump(mode="json", exclude_none=True))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):  # enums
        return value.value
    return value


def _excerpt(text: str, limit: int = 80) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())
