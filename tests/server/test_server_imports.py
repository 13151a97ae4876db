"""DESIGN: the trust boundary is visible in the imports. server_app sees only what sites send, so it loads nothing
from site_agent; site_agent loads nothing from server_app, jobs or provisioning; fl_contract loads neither side."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "server_app": ("site_agent",),
    "site_agent": ("server_app", "jobs", "provisioning"),
    "fl_contract": ("site_agent", "server_app", "jobs", "provisioning"),
}


def _modules(package: str) -> list[str]:
    root = ROOT / package
    return sorted(".".join((package, *p.relative_to(root).with_suffix("").parts)) for p in root.rglob("*.py")
                  if p.name != "__init__.py")


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_loads_nothing_from_the_other_side(package):
    modules = _modules(package)
    program = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
        "print('\\n'.join(sorted(sys.modules)))"

    loaded = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()

    assert len(modules) > 5
    assert [m for m in loaded if m.split(".")[0] in FORBIDDEN[package]] == []


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_source_names_nothing_from_the_other_side(package):
    """Imports inside functions count too: they run when that function does."""
    named = {f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / package).rglob("*.py")
             for name in _imported_names(path) if name.split(".")[0] in FORBIDDEN[package]}

    assert named == set()


def _imported_names(path: Path) -> list[str]:
    import ast

    tree = ast.parse(path.read_text())
    names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0]
    return names + [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
