"""Fixtures for the site's own checks: one provisioned one-site federation per session, and a fresh copy of its
site kit per test (tests change modes, folders and the server address in their copy)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from federation_tools.loopback import free_port
from provisioning.provision import Federation, customise, load_template, provision


@pytest.fixture(scope="session")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> Federation:
    return provision(customise(load_template(None), name="checks", sites=["site-1"], port=free_port()),
                     tmp_path_factory.mktemp("kits"))


@pytest.fixture
def kit(provisioned: Federation, tmp_path: Path) -> Path:
    copy = tmp_path / "site-1"
    shutil.copytree(provisioned.kit("site-1"), copy)
    return copy
