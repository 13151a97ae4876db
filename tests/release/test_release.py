"""The release artifacts site IT installs: scripts/build_release.sh builds a wheel (from the sdist) holding every
package, data file and console script of pyproject.toml, and neither artifact carries tests, benchmarks, caches, the
test harness (tests/harness/) or the research drivers (research/)."""

from __future__ import annotations

import configparser
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(pattern.rstrip("*") for pattern in  # every package pyproject.toml distributes
           tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"])
# What tests and bench/ run from a source checkout, never a site, a server or an admin: the test harness (imported as
# `harness`) and the research drivers, by package and by the file names they had in federation_tools/.
CHECKOUT_ONLY_PACKAGES = frozenset({"harness", "research"})
CHECKOUT_ONLY_FILES = frozenset({"slow_start.py", "as_service.py", "wan.py", "link_emulator.py",
                                 "playerfl_inprocess.py", "playerfl_compare.py", "fedkt_references.py"})


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist) as the release script builds them, into a temporary folder."""
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run(["bash", str(ROOT / "scripts" / "build_release.sh"), str(out)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    paths = [Path(line) for line in run.stdout.split()]
    assert [p.parent for p in paths] == [out, out] and all(p.is_file() for p in paths), run.stdout
    wheel, sdist = paths
    assert wheel.suffix == ".whl" and sdist.name.endswith(".tar.gz")
    return wheel, sdist


def _source_files(pattern: str) -> set[str]:
    """Files of the import packages in the checkout, relative to the repository root, caches left out."""
    return {p.relative_to(ROOT).as_posix() for package in PACKAGES for p in (ROOT / package).rglob(pattern)
            if "__pycache__" not in p.parts}


def test_wheel_holds_every_module_and_subpackage_the_provisioning_and_page_templates_and_demo_model(artifacts):
    wheel, _ = artifacts

    names = set(zipfile.ZipFile(wheel).namelist())

    modules = _source_files("*.py")
    packages = {Path(m).parent.as_posix() for m in modules}
    assert modules - names == set()
    assert {f"{p}/__init__.py" for p in packages} - names == set()  # a folder without one would be left out
    assert _source_files("*.yml") and _source_files("*.yml") <= names
    assert _source_files("templates/*.html") and _source_files("templates/*.html") <= names  # the status pages'
    assert len(_source_files("demo_dcae/*")) == 4 and _source_files("demo_dcae/*") <= names  # fl-demo's autoencoder


def test_wheel_has_every_console_script_of_pyproject(artifacts):
    wheel, _ = artifacts
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(archive.read(info).decode())
        names = set(archive.namelist())

    assert dict(entry_points["console_scripts"]) == scripts
    for target in scripts.values():
        assert target.split(":")[0].replace(".", "/") + ".py" in names


def test_artifacts_carry_no_tests_benchmarks_or_caches(artifacts):
    wheel, sdist = artifacts

    wheel_names = zipfile.ZipFile(wheel).namelist()
    with tarfile.open(sdist) as archive:
        sdist_names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]

    top_level = {name.split("/")[0] for name in wheel_names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == set(PACKAGES)
    for name in sdist_names:
        parts = name.split("/")
        assert parts[0] not in {"tests", "bench", "research", ".venv", ".pytest_cache", "build", "dist"}, name
        assert "__pycache__" not in parts and not name.endswith((".pyc", ".pyo")), name


def checkout_only(names: list[str]) -> list[str]:
    """The archive members that belong to a source checkout only: under a folder named like the harness or research
    package, or a file named like one of their modules."""
    return sorted(name for name in names if CHECKOUT_ONLY_PACKAGES & set(name.split("/")[:-1])
                  or name.rsplit("/", 1)[-1] in CHECKOUT_ONLY_FILES)


def test_wheel_holds_no_test_harness_or_research_driver(artifacts):
    wheel, _ = artifacts

    names = zipfile.ZipFile(wheel).namelist()

    assert checkout_only(names) == []
    assert {path.name for path in (ROOT / "tests" / "harness").glob("*.py")} >= {"slow_start.py", "as_service.py"}
    assert {path.name for path in (ROOT / "research").glob("*.py")} >= {"fedkt_references.py"}  # moved, not gone


def test_the_check_names_a_harness_or_research_module_wherever_it_lies():
    names = ["federation_tools/loopback.py", "federation_tools/wan.py", "research/__init__.py",
             "federation_tools/harness/federation.py", "site_agent/kit/service.py",
             "hospital_fl-0.1.0.dist-info/RECORD"]

    assert checkout_only(names) == ["federation_tools/harness/federation.py", "federation_tools/wan.py",
                                    "research/__init__.py"]
