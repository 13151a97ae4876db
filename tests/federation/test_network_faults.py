"""Real network faults on FLARE's real traffic: every site of a provisioned loopback federation in its own network
namespace behind the userspace link emulator (tests/harness/wan.py, kind `emulator`), the server in the root
namespace. Nothing is frozen or killed: packets are delayed, dropped, rate-limited or black-holed, TCP and FLARE's
reconnects do the rest.

- 200 ms each way and 2% loss both ways on every link: a job completes with every site in every round;
- a site at 2 Mbit/s with a 5.6 MB segmentation model takes part, and its transfer took at least 0.8 x bytes / rate
  (the link was applied: on loopback it takes milliseconds);
- two sites' links black-holed for three times the server's heartbeat timeout, one of them rebooted meanwhile:
  with every site required, both take part again once the links are back and every round holds every site;
- every link black-holed for 40 s (as when the server's own network goes): the job completes, every site in every
  round.

The frozen-process variants (SIGSTOP, TCP connections kept) are tests/federation/test_faults.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from harness.wan import EmulatedLink, namespaces_unavailable
from support import ADMIN, SITES, connected_sites, provision_demo_federation, submit, wait_for_rounds, wait_until

from federation_tools.admin import follow_job
from federation_tools.job_cli import main as fl_job
from federation_tools.loopback import LoopbackFederation
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from provisioning.policy import SERVER_HEARTBEAT_TIMEOUT_S
from server_app.transfers import TRANSFERS_FILE
from site_agent.kit.startup import SiteKit

pytestmark = [pytest.mark.federation, pytest.mark.faults,
              pytest.mark.needs(namespaces_unavailable("emulator"), "emulated WAN links")]

SLOW = "site-3"
RATE_MBIT = 2.0
SEGMENTATION_5MB = ["--roi-size", "32", "32", "32", "--init-filters", "8", "--blocks-down", "1", "2", "2", "5",
                    "--blocks-up", "1", "1", "1", "--dropout-prob", "0", "--learning-rate", "0.01",
                    "--val-fraction", "0.2", "--test-fraction", "0.2"]
"""A SegResNet of 1.40 M parameters (5.6 MB in float32) on the CPU demo's 32^3 cases: 22 s each way at 2 Mbit/s."""


@pytest.fixture(scope="module")
def wan(tmp_path_factory) -> Iterator[tuple[LoopbackFederation, dict[str, EmulatedLink]]]:
    federation = provision_demo_federation(tmp_path_factory.mktemp("wan"))
    loopback = LoopbackFederation(federation)
    port = SiteKit.open(federation.kit(SITES[0])).server_port
    with ExitStack() as links_stack:
        links = {site: links_stack.enter_context(EmulatedLink(kind="emulator", relay_ports=(port,)))
                 for site in SITES}
        try:
            loopback.start_server()
            for site in SITES:
                loopback.start_site(site, prefix=tuple(links[site].command()))
            loopback.wait_for_sites(ADMIN, SITES, timeout=120)
            yield loopback, links
        finally:
            loopback.stop()  # every process, by PID (no shutdown through FLARE: nothing to keep), before the links go


def _run(loopback: LoopbackFederation, params: FedAvgLinearParams, tmp_path, during=None) -> dict:
    """Submit a fedavg-linear job, call `during(job_id)` while it runs, and return its results.json."""
    session = loopback.session(ADMIN)
    try:
        job_id = submit(session, export(build_job(KIND, params), tmp_path))
        if during is not None:
            during(job_id)
        outcome = follow_job(session, job_id, timeout=420, progress=None)
    finally:
        session.close()
    assert outcome.completed, outcome.refusal()
    results = outcome.results()
    assert results["status"] == "finished", results.get("error")
    return results


def test_200_ms_and_2_percent_loss_on_every_link_leave_every_round_complete(wan, tmp_path):
    loopback, links = wan
    for link in links.values():
        link.set_conditions(delay_ms=200.0, loss_to_site=0.02, loss_from_site=0.02)
    try:
        results = _run(loopback, FedAvgLinearParams(num_rounds=2), tmp_path)
        dropped = {site: sum(c.dropped_loss for c in link.counters().values()) for site, link in links.items()}
    finally:
        for link in links.values():
            link.set_conditions(delay_ms=0.0, loss_to_site=0.0, loss_from_site=0.0)
    assert [sorted(r["sites"]) for r in results["rounds"]] == [SITES] * 2
    assert all(count > 0 for count in dropped.values()), dropped  # the loss was applied on every link


def test_a_site_at_2_mbit_with_a_5_mb_model_takes_part_and_its_transfer_took_the_links_time(wan, capsys):
    loopback, links = wan
    links[SLOW].set_conditions(mbit=RATE_MBIT)
    try:
        code = fl_job(["submit", "brats-segmentation", "--admin-kit", str(loopback.federation.kit(ADMIN)),
                       "--num-rounds", "1", *SEGMENTATION_5MB, "--timeout", "420"])
    finally:
        links[SLOW].set_conditions(mbit=0.0)
    printed = capsys.readouterr().out
    assert code == 0, printed
    [result_dir] = [line.split(": ", 1)[1] for line in printed.splitlines() if line.startswith("results of job ")]
    app = f"{result_dir}/workspace/app_server"
    with open(f"{app}/results.json") as handle:
        results = json.load(handle)
    with open(f"{app}/{TRANSFERS_FILE}") as handle:
        transfers = json.load(handle)
    assert sorted(results["rounds"][0]["sites"]) == SITES and transfers["failing_sites"] == {}
    for site in SITES:  # every link accounted, in the download and in what `fl-job submit` printed
        [row] = [row for row in transfers["rounds"]["1"][site] if row["task"] == "train"]
        assert row["fetches"] == 1 and row["site_seconds"] > 0 and row["bytes_to_site"] > 5_000_000, row
        sent = sum(r["bytes_to_site"] for rows in transfers["rounds"].values() for r in rows.get(site, []))
        assert f"link {site}: {sent / 1e6:.1f} MB to the site" in printed, printed
    [train] = [row for row in transfers["rounds"]["1"][SLOW] if row["task"] == "train"]
    moved = train["bytes_to_site"] + train["bytes_from_site"]
    assert moved >= 2 * 5_000_000, train
    # a transfer cannot beat its link's rate: the server's own account shows the limit applied (a lower bound, a
    # property of the link, not a clock)
    assert train["seconds"] >= 0.8 * moved * 8 / (RATE_MBIT * 1e6), train


def test_sites_black_holed_past_the_heartbeat_timeout_one_rebooted_meanwhile_take_part_again(wan, tmp_path):
    """min_clients = every site: site-3's and site-2's links are black-holed for 60 s, three times the server's
    heartbeat timeout; site-3's processes live through it (a VPN outage), site-2's machine reboots during it (every
    process of its kit killed, its client started again behind the dead link, as its service would). Once the links
    are back, site-3's job process carries on and the server deploys the running job to site-2 again: the round
    waits for them (quorum_wait_s), and every round of the job holds every site."""
    loopback, links = wan
    outage_s = 3 * SERVER_HEARTBEAT_TIMEOUT_S
    rebooted = SITES[1]

    def outage(job_id: str) -> None:
        wait_for_rounds(loopback.federation, job_id, 2, timeout=180)
        with links[SLOW].down(), links[rebooted].down():
            time.sleep(outage_s / 3)
            loopback.kill_participant(rebooted)
            time.sleep(outage_s / 3)
            loopback.start_site(rebooted, prefix=tuple(links[rebooted].command()))
            time.sleep(outage_s / 3)
        wait_until(lambda: _registered_or_restarted(loopback, rebooted, links), 120, f"{rebooted} registered")

    results = _run(loopback, FedAvgLinearParams(num_rounds=6, min_clients=len(SITES), quorum_wait_s=180),
                   tmp_path, outage)
    assert [r["round"] for r in results["rounds"]] == list(range(1, 7))
    assert all(sorted(r["sites"]) == SITES for r in results["rounds"]), [r["sites"] for r in results["rounds"]]
    waited = {site for r in results["rounds"] for site in r.get("waited_for_sites", {})}
    assert {SLOW, rebooted} <= waited, [r.get("waited_for_sites") for r in results["rounds"]]


def _registered_or_restarted(loopback: LoopbackFederation, site: str, links: dict[str, EmulatedLink]) -> bool:
    """The site is connected; a client that gave up while its link was down is started again, as its service
    manager would (FLARE's client exits when it cannot reach the server)."""
    if loopback.participants[site].process.poll() is not None:
        loopback.start_site(site, prefix=tuple(links[site].command()))
    return site in connected_sites(loopback)


def test_every_link_black_holed_for_40_s_leaves_every_site_in_every_round(wan, tmp_path):
    loopback, links = wan

    def outage(job_id: str) -> None:
        wait_for_rounds(loopback.federation, job_id, 2, timeout=180)
        with ExitStack() as down:
            for link in links.values():
                down.enter_context(link.down())
            time.sleep(40)

    results = _run(loopback, FedAvgLinearParams(num_rounds=5), tmp_path, outage)
    assert [r["round"] for r in results["rounds"]] == list(range(1, 6))
    assert all(sorted(r["sites"]) == SITES for r in results["rounds"]), results["rounds"]
