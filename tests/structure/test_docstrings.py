"""A long function says why it exists: every function in the product packages whose body runs over 20 lines has a
docstring (read with ast, so nested functions and methods count too). Short ones may speak through their name."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = tuple(pattern.rstrip("*") for pattern in  # every package pyproject.toml distributes
          tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"])
MAX_UNDOCUMENTED_LINES = 20


def undocumented_long_functions(root: Path, packages: tuple[str, ...]) -> list[str]:
    """`file:line name (N lines)` of every function whose body (first statement to last line) is longer than
    MAX_UNDOCUMENTED_LINES and that has no docstring."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or ast.get_docstring(node):
                    continue
                lines = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
                if lines > MAX_UNDOCUMENTED_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_every_long_product_function_has_a_docstring():
    assert undocumented_long_functions(ROOT, PRODUCT) == []


def test_the_checker_finds_a_long_function_without_a_docstring(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_UNDOCUMENTED_LINES + 1))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        f"def long():\n{body}\n\ndef documented():\n    '''Why.'''\n{body}\n\ndef short():\n    return 1\n")

    found = undocumented_long_functions(tmp_path, ("pkg",))

    assert found == [f"pkg/mod.py:1 long ({MAX_UNDOCUMENTED_LINES + 1} lines)"]
