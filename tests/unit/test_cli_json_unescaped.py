"""Every JSON the CLI prints keeps Chinese readable: `json.dumps(..., ensure_ascii=False)`, so a reason,
a name or a note in Chinese reads 配额不足, not \\u914d\\u989d\\u4e0d\\u8db3 (found: `cardflow nodes --json`)."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "services" / "cli"


def escaping_dumps(path: Path) -> list[int]:
    """Lines of `json.dumps(...)` calls in `path` without `ensure_ascii=False`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "json.dumps":
            keeps = any(k.arg == "ensure_ascii" and isinstance(k.value, ast.Constant) and k.value.value is False
                        for k in node.keywords)  # fmt: skip
            if not keeps:
                lines.append(node.lineno)
    return lines


def test_every_json_the_cli_prints_keeps_chinese_readable() -> None:
    found = {path.name: lines for path in sorted(CLI.glob("*.py")) if (lines := escaping_dumps(path))}
    assert found == {}, f"json.dumps without ensure_ascii=False (file: lines): {found}"
