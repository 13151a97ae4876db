"""The release artifacts site IT installs: scripts/build_release.sh builds a wheel (from the sdist) holding every
package, data file and console script of pyproject.toml, and neither artifact carries tests, benchmarks or caches."""

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
        assert parts[0] not in {"tests", "bench", ".venv", ".pytest_cache", "build", "dist"}, name
        assert "__pycache__" not in parts and not name.endswith((".pyc", ".pyo")), name
