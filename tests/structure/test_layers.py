"""DESIGN: the packages form layers and every import points down. fl_runtime is the ground (the process machinery
both kits run: the warm job launcher); fl_contract stands on it (what sites and server agree on); site_agent and
server_app stand on that side by side and never import each other (the trust boundary: the server sees only what
sites send); reports renders a downloaded results.json (pages, plots: nothing a kit's processes run); jobs declares
the job kinds over both; provisioning writes kits from the job registry; federation_tools (fl-job, fl-demo, the
simulator runner, the loopback launcher) sits on top. Imports inside functions and under TYPE_CHECKING count too:
they run, or type-check, against that layer."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = (("fl_runtime",), ("fl_contract",), ("site_agent", "server_app"), ("reports",), ("jobs",), ("provisioning",),
          ("federation_tools",))
LAYER_OF = {package: level for level, layer in enumerate(LAYERS) for package in layer}


def package_imports(root: Path, packages: set[str]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the `file:line` of each such import, read from the source with
    ast: every `import` and `from ... import` anywhere in a module (relative imports stay in their package)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for imported in {name.split(".")[0] for name in names} & (packages - {package}):
                    edges.setdefault((package, imported), []).append(f"{path.relative_to(root)}:{node.lineno}")
    return edges


def layering_violations(edges: dict[tuple[str, str], list[str]], layer_of: dict[str, int]) -> list[str]:
    """Every import of a package from the same or a higher layer (so also every cycle between packages)."""
    return [f"{place}: {importer} (layer {layer_of[importer]}) imports {imported} (layer {layer_of[imported]})"
            for (importer, imported), places in sorted(edges.items()) if layer_of[imported] >= layer_of[importer]
            for place in places]


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Each package that reaches itself through imports, with the path it takes (depth-first)."""
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
    found = []
    for start in sorted(graph):
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append([*path, start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


def test_every_distributed_package_has_a_layer():
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]

    assert {pattern.rstrip("*") for pattern in include} == set(LAYER_OF)


def test_every_import_points_to_a_lower_layer_and_no_package_imports_itself_back():
    edges = package_imports(ROOT, set(LAYER_OF))

    assert ("federation_tools", "provisioning") in edges and ("jobs", "site_agent") in edges  # the graph is read
    assert layering_violations(edges, LAYER_OF) == []
    assert cycles(edges) == []


def test_no_distributed_package_imports_the_test_harness_or_the_research_drivers():
    """tests/harness/ (`harness`) and research/ run from a source checkout and are not in the wheel: an import of
    either from a package that is would fail at a site (fl-demo's FedKT-CSD step once imported research's
    references)."""
    checkout_only = {"research", "harness"}  # no folder ROOT/harness: only the packages' imports of it are read
    edges = package_imports(ROOT, set(LAYER_OF) | checkout_only)

    assert [f"{place}: {importer} imports {imported}" for (importer, imported), places in sorted(edges.items())
            if importer in LAYER_OF and imported in checkout_only for place in places] == []
    assert ("research", "federation_tools") in edges  # research/ itself was read: it stands on the packages


def test_the_check_names_an_upward_import_inside_a_function_and_a_cycle(tmp_path):
    for package, source in {"low": "def f():\n    from high.tool import run\n", "high": "import low\n"}.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "tool.py").write_text(source)

    edges = package_imports(tmp_path, {"low", "high"})

    assert layering_violations(edges, {"low": 0, "high": 1}) == [
        f"{Path('low/tool.py')}:2: low (layer 0) imports high (layer 1)"]
    assert cycles(edges) == [["high", "low", "high"], ["low", "high", "low"]]


def _modules(package: str) -> list[str]:
    root = ROOT / package
    return sorted(".".join((package, *p.relative_to(root).with_suffix("").parts)) for p in root.rglob("*.py")
                  if p.name != "__init__.py")


def _third_party_imports(packages: list[str]) -> list[str]:
    """The modules outside our packages that the packages' modules import at their top level (read with ast)."""
    names = set()
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
    return sorted(n for n in names if n.split(".")[0] not in LAYER_OF and n != "__future__")


# One interpreter loads the third-party libraries once (torch, MONAI, FLARE: most of the import time), then a forked
# child per package imports every module of that package alone and reports sys.modules; nothing of ours is loaded
# before the fork (the parent says so), so each child sees exactly what its own package pulls in.
IMPORT_EACH_PACKAGE = """
import importlib, json, os, sys, traceback
packages, ours, third_party = json.loads(sys.argv[1])
for name in third_party:
    try:
        importlib.import_module(name)
    except Exception:  # an optional library: the package's child then meets the error itself, or guards it
        pass
report = {"preloaded": sorted(m for m in sys.modules if m.split(".")[0] in ours), "packages": {}}
for package, modules in packages.items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            for module in modules:
                importlib.import_module(module)
            answer = {"loaded": sorted(sys.modules)}
        except BaseException:
            answer = {"error": traceback.format_exc()}
        with os.fdopen(write, "w") as out:
            json.dump(answer, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        report["packages"][package] = json.load(answer)
    os.waitpid(pid, 0)
print(json.dumps(report))
"""
CHECKED = ["fl_contract", "site_agent", "server_app"]


@pytest.fixture(scope="module")
def imported_alone() -> dict:
    packages = {package: _modules(package) for package in CHECKED}
    argument = json.dumps([packages, sorted(LAYER_OF), _third_party_imports(CHECKED)])
    run = subprocess.run([sys.executable, "-c", IMPORT_EACH_PACKAGE, argument], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["preloaded"] == []  # the libraries loaded before the fork brought in nothing of ours
    return {package: {"modules": packages[package], **answer} for package, answer in report["packages"].items()}


@pytest.mark.parametrize("package", CHECKED)
def test_importing_every_module_of_a_package_loads_nothing_from_its_layer_or_above(package, imported_alone):
    """At run time too (an import_module of a string would escape the source check): the contract and the two
    sides of the trust boundary, with every one of their modules imported, have loaded no other package of ours
    from their own layer or above."""
    result = imported_alone[package]

    assert "error" not in result, result.get("error", "")[-3000:]
    loaded = result["loaded"]
    assert len(result["modules"]) > 5 and set(result["modules"]) <= set(loaded)
    above = {p for p, level in LAYER_OF.items() if level >= LAYER_OF[package] and p != package}
    assert [m for m in loaded if m.split(".")[0] in above] == []
