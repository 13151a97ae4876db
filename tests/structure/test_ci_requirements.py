"""A test that needs a tool this machine lacks skips with the reason, except under CI=true, where it fails: a CI run
must not pass by skipping the network and DICOM-validation tests (`require` in tests/support.py, the `needs` marker)."""

from __future__ import annotations

import conftest
import pytest
from support import require


def test_nothing_missing_runs_the_test(monkeypatch):
    monkeypatch.setenv("CI", "true")
    require(None, "an emulated WAN link")


def test_outside_ci_a_missing_tool_skips_with_its_reason(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="an emulated WAN link: tc not installed"):
        require("tc not installed (iproute2)", "an emulated WAN link")


def test_under_ci_a_missing_tool_fails(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="DICOM validation: dciodvfy is not installed, under CI=true"):
        require("dciodvfy is not installed", "DICOM validation")


def test_the_needs_marker_is_checked_before_the_test_runs(request, monkeypatch):
    monkeypatch.setenv("CI", "true")
    request.node.add_marker(pytest.mark.needs("no /dev/net/tun", "an emulator link"))
    with pytest.raises(pytest.fail.Exception, match="an emulator link: no /dev/net/tun"):
        conftest.pytest_runtest_setup(request.node)
