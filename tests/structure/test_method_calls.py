"""Every `self.name(...)` a server workflow or site task calls exists on its class.

FLARE ships no type information, so mypy sees its ModelController and Executor as Any and lets any attribute of a
subclass's `self` pass: a method renamed or removed in a refactor still type-checks, and fails only when a job
reaches the call (it did: FedAvg's final test task called a `_broadcast` that the send refactor had removed).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("server_app", "site_agent/tasks")


def _calls(cls_node: ast.ClassDef) -> tuple[set[str], set[str]]:
    """(names called as `self.name(...)`, names assigned as `self.name = ...`) in the class's methods."""
    called, assigned = set(), set()
    for node in ast.walk(cls_node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
            called.add(node.func.attr)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign | ast.AugAssign) else []
        for target in [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                assigned.add(target.attr)
    return called, assigned


def _classes() -> list[tuple[str, str, set[str], set[str]]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    found.append((module, node.name, *_calls(node)))
    return found


@pytest.mark.parametrize("module, name, called, assigned", _classes(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_method_a_class_calls_on_self_exists(module: str, name: str, called: set[str],
                                                   assigned: set[str]) -> None:
    cls = getattr(importlib.import_module(module), name)
    missing = sorted(attr for attr in called - assigned if not hasattr(cls, attr))
    assert missing == [], f"{module}.{name} calls self.{', self.'.join(missing)}, which it does not have"


def test_the_check_finds_a_missing_method() -> None:
    tree = ast.parse("class A:\n    def f(self):\n        self.g()\n        self.h, self.i = 1, 2\n        self.h()\n")
    called, assigned = _calls(tree.body[0])  # type: ignore[arg-type]
    assert called == {"g", "h"} and assigned == {"h", "i"}
