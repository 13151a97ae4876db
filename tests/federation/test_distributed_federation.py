"""A federation built only by distributed provisioning (each key made in its participant's own folder) runs
fedavg-linear to the reference weights; a site renewed while a job runs on the others takes part in the next job
with its new certificate and its old one is refused; a revoked site is out within a heartbeat and cannot come back
with its kit. Through the product's commands (fl-provision, site-agent); every process is stopped by PID."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ADMIN, FEDAVG_REFERENCE, SITES, connected_sites, distributed_demo_federation, wait_until

from federation_tools.admin import follow_job, submit_and_wait
from federation_tools.loopback import LoopbackFederation
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from provisioning.cli import main as fl_provision
from site_agent.cli import main as site_agent
from site_agent.kit.start import EXIT_REFUSED

pytestmark = pytest.mark.federation



def _start_refused(kit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "site_agent.cli", "start", "--kit", str(kit), "--timeout", "20"],
                          capture_output=True, text=True, timeout=120)


def _weights(outcome) -> dict[int, list[float]]:
    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    return {r["round"]: r["global_weights"]["weight"] for r in results["rounds"]}


def test_a_distributed_federation_trains_renews_a_site_during_a_job_and_revokes_one(tmp_path):
    built = distributed_demo_federation(tmp_path)
    federation = built.federation
    loopback = LoopbackFederation(federation)
    renewed, revoked = SITES[1], SITES[2]
    old_kit = tmp_path / "old-kit"
    try:
        loopback.bring_up(ADMIN)
        check = subprocess.run([sys.executable, "-m", "site_agent.cli", "check", "--kit",
                                str(federation.kit(SITES[0]))], capture_output=True, text=True, timeout=300)
        assert check.returncode == 0, check.stdout + check.stderr

        # Renewal of site-2 while a job runs on sites 1 and 3.
        loopback.stop_participant(renewed)
        shutil.copytree(federation.kit(renewed), old_kit)
        wait_until(lambda: renewed not in connected_sites(loopback), 60, f"the server still lists {renewed}")
        session = loopback.session(ADMIN)
        try:
            job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=3, min_clients=2)), tmp_path / "jobs2")
            running = str(session.submit_job(str(job_dir)))
            request = built.homes[renewed] / "renewal"
            assert site_agent(["request", "--project", federation.project, "--name", renewed, "--org",
                               "site_2", "--out", str(request)]) == 0
            assert fl_provision(["approve", str(request / f"{renewed}.request.zip"), "--workspace", str(built.lead),
                                 "--ca-dir", str(built.ca), "--server-kit", str(built.server_kit())]) == 0
            assert site_agent(["install-kit", str(built.lead / "approved" / f"{renewed}.approved.zip"),
                               "--request-dir", str(request), "--fingerprint", built.fingerprint,
                               "--renew", str(federation.kit(renewed))]) == 0
            loopback.start_site(renewed)
            during = follow_job(session, running, 300, True, None)
        finally:
            session.close()
        assert during.completed, during.refusal()
        rounds = json.loads((during.server_app_dir() / "results.json").read_text())["rounds"]
        assert [sorted(r["sites"]) for r in rounds] == [[SITES[0], SITES[2]]] * 3  # untouched, every round complete

        loopback.wait_for_sites(ADMIN, SITES)
        session = loopback.session(ADMIN)
        try:
            outcome = submit_and_wait(session, export(build_job(KIND, FedAvgLinearParams()), tmp_path / "jobs"),
                                      timeout=300, progress=None)
        finally:
            session.close()
        assert outcome.completed, outcome.refusal()
        results = json.loads((outcome.server_app_dir() / "results.json").read_text())
        assert all(sorted(r["sites"]) == SITES for r in results["rounds"])  # site-2 with its renewed certificate
        for round_number, expected in FEDAVG_REFERENCE.items():
            assert _weights(outcome)[round_number] == pytest.approx(expected, abs=5e-4)

        loopback.stop_participant(renewed)  # its old kit, whose certificate the renewal replaced
        refused = _start_refused(old_kit)
        assert refused.returncode == EXIT_REFUSED, refused.stderr
        assert "is not the one approved for it (a renewal replaced it)" in refused.stderr

        assert fl_provision(["revoke", revoked, "--workspace", str(built.lead),
                             "--server-kit", str(built.server_kit())]) == 0
        wait_until(lambda: revoked not in connected_sites(loopback), 30, f"{revoked} was not put out")
        loopback.stop_participant(revoked)
        refused = _start_refused(federation.kit(revoked))
        assert refused.returncode == EXIT_REFUSED, refused.stderr
        assert f"of site {revoked!r} was revoked by the federation lead" in refused.stderr
    finally:
        loopback.stop()  # by PID: a lead admin may not shut the system down
