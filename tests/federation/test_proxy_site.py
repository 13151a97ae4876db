"""A site whose only route out is the hospital's HTTP proxy: in a network namespace that reaches nothing but a
tinyproxy (CONNECT only, to the server's port), configured with `site-agent configure --proxy`, it passes
`site-agent check`, is started by `site-agent start` as site IT runs it, and trains in every round; the proxy's log
shows the tunnel. A proxy that refuses the server's port is named by `check`. The federation's kits use FLARE's grpc
transport, the one that goes through a proxy. Every process is stopped by PID."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from harness.wan import EmulatedLink, namespaces_unavailable
from support import ADMIN, SITES, provision_demo_federation

from federation_tools.admin import submit_and_wait
from federation_tools.loopback import LoopbackFederation, free_port
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from site_agent.cli import main as site_agent
from site_agent.kit.processes import stop_process_tree
from site_agent.kit.startup import SiteKit

TINYPROXY = shutil.which("tinyproxy")
pytestmark = [pytest.mark.federation, pytest.mark.faults,
              pytest.mark.needs(namespaces_unavailable(), "a site in a network namespace"),
              pytest.mark.needs(None if TINYPROXY else "tinyproxy is not installed (Debian: tinyproxy)",
                                "a proxy-only site")]

PROXIED = SITES[-1]


def _tinyproxy(folder: Path, listen: str, connect_port: int) -> tuple[subprocess.Popen[bytes], Path, str]:
    """A tinyproxy in the foreground on `listen` that tunnels (CONNECT) to `connect_port` only: its process, its
    log and its URL, once it accepts connections."""
    folder.mkdir(parents=True, exist_ok=True)
    port, log = free_port(), folder / "tinyproxy.log"
    (folder / "tinyproxy.conf").write_text(
        f'Port {port}\nListen {listen}\nTimeout 600\nMaxClients 50\nLogLevel Connect\nLogFile "{log}"\n'
        f"ConnectPort {connect_port}\n")
    process = subprocess.Popen([str(TINYPROXY), "-d", "-c", str(folder / "tinyproxy.conf")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((listen, port), timeout=1).close()
            return process, log, f"http://{listen}:{port}"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tinyproxy did not start on {listen}:{port}") from None
            time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    stop_process_tree(process.pid, tree, 10.0)
    process.wait(timeout=10)


def _check(link: EmulatedLink, kit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(link.command(sys.executable, "-m", "site_agent.cli", "check", "--kit", str(kit)),
                      capture_output=True, text=True, timeout=300)


def test_a_site_that_reaches_the_server_only_through_a_proxy_joins_and_trains(tmp_path):
    federation = provision_demo_federation(tmp_path / "federation", name="proxied-federation", scheme="grpc")
    loopback = LoopbackFederation(federation)
    kit = federation.kit(PROXIED)
    server_port = SiteKit.open(kit).server_port
    started: list[subprocess.Popen[bytes]] = []
    with EmulatedLink(relay_ports=()) as link:  # the namespace reaches the link's root address, nothing else
        try:
            proxy, proxy_log, proxy_url = _tinyproxy(tmp_path / "proxy", link.root_address, server_port)
            started.append(proxy)
            assert site_agent(["configure", "--kit", str(kit), "--proxy", proxy_url]) == 0
            loopback.start_server()
            for site in SITES[:-1]:
                loopback.start_site(site)
            check = _check(link, kit)
            assert check.returncode == 0, check.stdout + check.stderr
            assert f"(through the proxy {proxy_url}): localhost accepted this site's certificate" in check.stdout
            start = link.command(sys.executable, "-m", "site_agent.cli", "start", "--kit", str(kit))
            site = subprocess.Popen(start, stdout=(tmp_path / "start.log").open("wb"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
            started.append(site)
            loopback.wait_for_sites(ADMIN, SITES, timeout=120)
            session = loopback.session(ADMIN)
            try:
                outcome = submit_and_wait(session, export(build_job(KIND, FedAvgLinearParams(num_rounds=2)),
                                                          tmp_path / "job"), timeout=300, progress=None)
            finally:
                session.close()
            assert outcome.completed, outcome.refusal()
            assert [sorted(r["sites"]) for r in outcome.results()["rounds"]] == [SITES] * 2
            assert f"CONNECT localhost:{server_port}" in proxy_log.read_text()

            refusing, _, refusing_url = _tinyproxy(tmp_path / "refusing", link.root_address, 1)
            started.append(refusing)
            assert site_agent(["configure", "--kit", str(kit), "--proxy", refusing_url]) == 0
            check = _check(link, kit)
            assert check.returncode != 0
            assert f"the proxy {refusing_url} would not open a tunnel to localhost:{server_port}" in check.stdout
        finally:  # every process, by PID, before the link goes
            for process in reversed(started):
                _stop(process)
            loopback.stop()
