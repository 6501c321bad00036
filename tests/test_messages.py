"""What every user-visible string of kcompact promises: it stands alone.

Messages, notes, findings and help may not cite sections of the implementation spec ("spec §6.15"): a
user does not have it. Docstrings and comments may; so this walks every string literal of the package
that is not a docstring.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kcompact

PACKAGE = Path(kcompact.__file__).parent


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_no_user_visible_string_cites_the_spec() -> None:
    citing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        citing += [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value[:80]!r}" for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and "§" in node.value
                   and id(node) not in docstrings]
    assert citing == []
