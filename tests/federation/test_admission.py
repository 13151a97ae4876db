"""Only the provisioned project's participants join, and a job waiting for a site says which, on the shared
provisioned federation.

A kit for `site-9` and an admin kit for `lead2@cc.org`, made by provisioning a second project.yml under the
federation's own CA state (so their certificates are genuine), are refused at registration; adding the site is the
provisioning step the admin guide gives (its new server list copied to the running server), with no restart; taking
it off the list again puts it out at its next heartbeat. A job submitted while a site is down names the site while
it waits and starts within seconds of the site's return. Every process a test starts is stopped by PID.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from nvflare.apis.fl_exception import FLCommunicationError
from nvflare.fuel.flare_api.flare_api import new_secure_session
from support import ADMIN, SITES, connected_sites, wait_until

from federation_tools.admin import follow_job
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from provisioning.provision import Federation, customise, provision
from server_app.admission import PARTICIPANTS_FILE
from site_agent.kit.start import EXIT_REFUSED

pytestmark = pytest.mark.federation

NEW_SITE = "site-9"
NEW_ADMIN = "lead2@cc.org"


def _provision_again(federation: Federation, workspace: Path) -> Federation:
    """The federation's project with one more site and admin, provisioned in `workspace` under the same CA state."""
    shutil.copytree(federation.ca_state, workspace / federation.project / "state")
    project = yaml.safe_load((federation.kits_dir.parent.parent / "project.yml").read_text())
    admins = {**federation.admins, NEW_ADMIN: "lead"}
    return provision(customise(project, sites=[*SITES, NEW_SITE], admins=admins), workspace)


def _server_log(federation: Federation) -> str:
    return (federation.kit(federation.server) / "log.txt").read_text(errors="replace")


def test_unlisted_participants_are_refused_and_a_provisioned_site_joins_without_a_restart(running_federation,
                                                                                           tmp_path):
    federation, loopback = running_federation.federation, running_federation.loopback
    second = _provision_again(federation, tmp_path / "provisioning")
    site_9 = second.kit(NEW_SITE)

    done = subprocess.run([sys.executable, "-m", "site_agent.cli", "start", "--kit", str(site_9), "--timeout", "20"],
                          capture_output=True, text=True, timeout=120)
    with pytest.raises(FLCommunicationError, match="client_registration"):  # FLARE's API: the login was rejected
        new_secure_session(NEW_ADMIN, str(second.kit(NEW_ADMIN)), timeout=5).close()

    assert done.returncode == EXIT_REFUSED, done.stderr
    assert f"the server refused to register {NEW_SITE}: site '{NEW_SITE}' is not a participant" in done.stderr
    assert "'Adding a site'" in done.stderr and "exit code 78" in done.stderr
    log = _server_log(federation)
    assert f"refused the registration of '{NEW_SITE}'" in log and f"refused the registration of '{NEW_ADMIN}'" in log
    assert NEW_SITE not in connected_sites(loopback)

    listed = federation.kit(federation.server) / "local" / PARTICIPANTS_FILE
    original = listed.read_bytes()
    try:
        shutil.copy(second.kit(second.server) / "local" / PARTICIPANTS_FILE, listed)  # the admin guide's step
        loopback.start_site(NEW_SITE, site_9)
        wait_until(lambda: NEW_SITE in connected_sites(loopback), 60, f"{NEW_SITE} did not join")
        new_secure_session(NEW_ADMIN, str(second.kit(NEW_ADMIN)), timeout=10).close()

        listed.write_bytes(original)  # off the list again: out at its next heartbeat (every 10 s)
        wait_until(lambda: NEW_SITE not in connected_sites(loopback), 30, f"{NEW_SITE} was not put out")
    finally:
        listed.write_bytes(original)
        if NEW_SITE in loopback.participants:
            loopback.stop_participant(NEW_SITE)
            del loopback.participants[NEW_SITE]
    assert f"refused the heartbeat of '{NEW_SITE}'" in _server_log(federation)
    assert set(SITES) <= connected_sites(loopback)


def test_a_job_waiting_for_a_site_names_it_and_starts_soon_after_it_returns(running_federation, tmp_path):
    loopback, down = running_federation.loopback, SITES[-1]
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=1, min_clients=len(SITES))), tmp_path)
    said: list[tuple[float, str]] = []  # what `fl-job submit` prints, and when
    session = running_federation.session()
    try:
        loopback.kill_participant(down)  # by PID, as a crash would
        session.remove_client(down)  # the server would notice by itself at the heartbeat timeout (20 s)
        job_id = str(session.submit_job(str(job_dir)))
        with ThreadPoolExecutor(1) as follower:
            following = follower.submit(follow_job, session, job_id, 180, False,
                                        lambda line: said.append((time.monotonic(), line)))
            wait_until(lambda: any("waiting to start" in line for _, line in said), 60, "the follower said nothing")
            loopback.bring_up(ADMIN)
            returned = time.monotonic()
            outcome = following.result()
    finally:
        session.close()
        loopback.bring_up(ADMIN)

    waiting = [line for _, line in said if "waiting to start" in line]
    started = next(at for at, line in said if line.endswith(": RUNNING"))
    assert outcome.completed, outcome.refusal()
    assert waiting[0] == (f"job {job_id}: waiting to start: connected sites ({len(SITES) - 1}) < min_sites "
                          f"({len(SITES)}); not connected: {down}"), said
    # in this order: waiting named the missing site, the site came back, then the job ran (within the follower's
    # 180 s: the scheduler's next pass, server_app's job_scheduler intervals)
    assert returned < started, said
