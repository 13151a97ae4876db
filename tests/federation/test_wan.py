"""A site behind a 2 Mbit/s link (its own network namespace, federation_tools.wan) takes part in every round of a
job submitted with `fl-job submit`, on the shared provisioned federation; `fl-job submit` and the download's
transfers.json show, per site and round, what each link carried. The slow-model cases (a 19 MB segmentation model
at 1-2 Mbit/s, outages) take minutes and run in bench/wan_testbed.py."""

from __future__ import annotations

import json

import pytest
from support import ADMIN, SITES

from federation_tools.job_cli import main as fl_job
from federation_tools.wan import EmulatedLink, namespaces_unavailable
from server_app.transfers import TRANSFERS_FILE
from site_agent.kit import SiteKit

pytestmark = [pytest.mark.federation, pytest.mark.needs(namespaces_unavailable("emulator"), "an emulated WAN link")]

SLOW = "site-3"
ROUNDS = 3


def test_a_site_on_a_2_mbit_link_takes_part_and_every_link_is_accounted(running_federation, capsys):
    loopback, federation = running_federation.loopback, running_federation.federation
    port = SiteKit.open(federation.kit(SLOW)).server_port
    loopback.stop_participant(SLOW)
    try:
        with EmulatedLink(mbit=2.0, relay_ports=(port,)) as link:
            loopback.start_site(SLOW, prefix=tuple(link.command()))
            try:
                loopback.wait_for_sites(ADMIN, SITES, timeout=90)
                code = fl_job(["submit", "fedavg-linear", "--admin-kit", str(federation.kit(ADMIN)),
                               "--num-rounds", str(ROUNDS), "--timeout", "300"])
            finally:
                loopback.stop_participant(SLOW)
    finally:
        loopback.start_site(SLOW)
        loopback.wait_for_sites(ADMIN, SITES, timeout=90)
    printed = capsys.readouterr().out

    assert code == 0, printed
    [result_dir] = [line.split(": ", 1)[1] for line in printed.splitlines() if line.startswith("results of job ")]
    app = f"{result_dir}/workspace/app_server"
    with open(f"{app}/results.json") as handle:
        results = json.load(handle)
    with open(f"{app}/{TRANSFERS_FILE}") as handle:
        transfers = json.load(handle)
    assert [sorted(r["sites"]) for r in results["rounds"]] == [SITES] * ROUNDS
    assert set(transfers["rounds"]) >= {str(r) for r in range(1, ROUNDS + 1)} and transfers["failing_sites"] == {}
    for round_number in range(1, ROUNDS + 1):
        for site in SITES:
            [train] = [row for row in transfers["rounds"][str(round_number)][site] if row["task"] == "train"]
            assert train["bytes_to_site"] == 8 and train["bytes_from_site"] == 8, train  # two float32 weights
            assert train["fetches"] == 1 and train["seconds"] >= 0 and train["site_seconds"] > 0, train
    for site in SITES:
        assert f"link {site}: 0.0 MB to the site, 0.0 MB back" in printed
