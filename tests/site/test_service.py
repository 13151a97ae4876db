"""Running a kit under systemd: the unit `site-agent service` writes, and how `site-agent start` talks to systemd."""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from harness.as_service import Service, run, unit_settings
from support import free_port

from provisioning.provision import Federation, customise, load_template, provision
from site_agent.kit.service import unit_for
from site_agent.kit.start import EXIT_REFUSED, EXIT_UNAVAILABLE, Watchdog, exit_status, notify

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Federation:
    project = customise(load_template(None), name="service-test", sites=["site-1"], port=free_port())
    return provision(project, tmp_path_factory.mktemp("kits"))


def test_site_unit_runs_the_start_check_and_restarts_what_can_recover(federation):
    kit = federation.kit("site-1")

    name, unit = unit_for(kit, user="flare", timeout=30, bin_dir=Path("/opt/fl/venv/bin"))

    settings = unit_settings(unit)
    assert name == "fl-site-1.service"
    assert settings["ExecStart"] == [f"/opt/fl/venv/bin/site-agent start --kit {kit} --timeout 30"]
    assert settings["WorkingDirectory"] == [str(kit)] and settings["User"] == ["flare"]
    assert "PATH=/opt/fl/venv/bin:/usr/local/bin:/usr/bin:/bin" in settings["Environment"]
    assert settings["Type"] == ["notify"] and settings["NotifyAccess"] == ["main"]
    assert settings["Restart"] == ["on-failure"] and settings["RestartSec"] == ["15"]
    assert settings["RestartPreventExitStatus"] == [str(EXIT_REFUSED)]  # a refused kit waits for a person
    assert int(settings["TimeoutStartSec"][0]) > 30 and settings["WatchdogSec"] == ["60"]
    assert settings["KillMode"] == ["mixed"]  # SIGTERM to site-agent, which stops the client and its job workers
    assert settings["WantedBy"] == ["multi-user.target"]


def test_the_status_page_switch_serves_the_site_page_from_the_unit(federation):
    kit = federation.kit("site-1")

    _, unit = unit_for(kit, user="flare", timeout=30, bin_dir=Path("/opt/fl/venv/bin"), status_port=8442)

    assert unit_settings(unit)["ExecStart"] == [
        f"/opt/fl/venv/bin/site-agent start --kit {kit} --timeout 30 --status-port 8442"]


def test_server_unit_runs_flare_server_as_its_start_script_does(federation):
    kit = federation.kit(federation.server)

    name, unit = unit_for(kit, user="flare", bin_dir=Path("/opt/fl/venv/bin"))

    settings = unit_settings(unit)
    assert name == f"fl-server-{federation.server}.service"
    assert settings["ExecStart"] == [
        f"/opt/fl/venv/bin/python -u -m nvflare.private.fed.app.server.server_train -m {kit} -s fed_server.json "
        "--set secure_train=true org=coordinating_centre config_folder=config"]
    assert settings["WorkingDirectory"] == [str(kit)]
    assert settings["Restart"] == ["on-failure"] and settings["Type"] == ["simple"]


def test_unit_runs_as_the_kit_owner_with_this_environment_by_default(federation):
    kit = federation.kit("site-1")

    _, unit = unit_for(kit)

    assert unit_settings(unit)["User"] == [kit.owner()]
    assert f"ExecStart={BIN / 'site-agent'} start --kit {kit} --timeout 30" in unit


@pytest.mark.needs(None if shutil.which("systemd-analyze") else "systemd-analyze is not installed (Debian: systemd)",
                   "checking the unit with systemd")
@pytest.mark.parametrize("participant", ["site-1", "server"])
def test_systemd_accepts_the_unit(federation, tmp_path, participant):
    kit = federation.kit(federation.server if participant == "server" else participant)
    name, unit = unit_for(kit, user=getpass.getuser())
    (tmp_path / name).write_text(unit)

    verified = subprocess.run(["systemd-analyze", "verify", str(tmp_path / name)], capture_output=True, text=True)

    assert verified.returncode == 0, verified.stderr
    assert name not in verified.stdout + verified.stderr  # systemd names the unit in every warning about it


def test_service_command_writes_the_unit_and_says_how_to_install_it(federation, tmp_path):
    kit = federation.kit("site-1")
    out = tmp_path / "fl-site-1.service"

    done = subprocess.run([sys.executable, "-m", "site_agent.cli", "service", "--kit", str(kit), "--user", "flare",
                           "--out", str(out)], capture_output=True, text=True, check=True)

    assert out.read_text() == unit_for(kit, user="flare")[1]
    assert "systemctl enable --now fl-site-1.service" in done.stderr


def test_ready_and_watchdog_reach_the_notify_socket(tmp_path, monkeypatch):
    address = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(address)
        listener.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.setenv("WATCHDOG_USEC", "2000000")

        notify("READY=1")
        Watchdog().feed()

        assert listener.recv(100) == b"READY=1"
        assert listener.recv(100) == b"WATCHDOG=1"


def test_watchdog_is_silent_without_systemd(monkeypatch):
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)

    assert Watchdog().interval == 0


@pytest.mark.parametrize("returncode, status", [(-9, 137), (-15, 143), (3, 3), (0, EXIT_UNAVAILABLE)])
def test_a_client_that_ends_by_itself_ends_start_with_a_failure(returncode, status):
    assert exit_status(returncode) == status


def test_a_kit_run_as_its_unit_runs_the_units_command_and_restarts_it_as_the_unit_says(federation):
    """tests/harness/as_service.py, which the fault tests use to 'reboot' a site, reads the unit this product
    writes rather than a copy of it."""
    service = Service.for_kit(federation.kit("site-1"))

    assert service.command == [str(BIN / "site-agent"), "start", "--kit", str(federation.kit("site-1")),
                               "--timeout", "30"]
    assert service.restart_s == 15 and service.final_statuses == {0, EXIT_REFUSED}


@pytest.mark.parametrize("final", [0, EXIT_REFUSED])
def test_a_failed_start_is_started_again_until_it_succeeds_or_is_refused(tmp_path, final):
    """Two starts exit 69 (the server slow to register the site), the third exits `final`: three runs, `final`
    returned; a refused kit (78) is not started again."""
    runs = tmp_path / "runs"
    script = (f"import sys, pathlib; p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() else 0; "
              f"p.write_text('x' * (n + 1)); sys.exit({EXIT_UNAVAILABLE} if n < 2 else {final})")

    status = run(Service([sys.executable, "-c", script], restart_s=0.0, final_statuses=frozenset([0, EXIT_REFUSED])))

    assert status == final and runs.read_text() == "xxx"
