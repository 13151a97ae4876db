"""`site-agent check`'s link row against the real provisioned federation: on loopback, and from a site namespace
behind an emulated 1 Mbit/s link (tests/harness/wan.py), where it warns with the segmentation round's transfer time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from harness.wan import EmulatedLink, namespaces_unavailable

from site_agent.kit.link import job_models
from site_agent.kit.preflight import OK, WARN, check_link
from site_agent.kit.startup import SiteKit

pytestmark = pytest.mark.federation

SITE = "site-1"
_CHECK_IN_NAMESPACE = ("import json, sys; from pathlib import Path; from site_agent.kit.startup import SiteKit; "
                       "from site_agent.kit.preflight import check_link; "
                       "row = check_link(SiteKit.open(Path(sys.argv[1]))); "
                       "print(json.dumps({'status': row.status, 'detail': row.detail, 'fix': row.fix}))")


def test_the_link_row_measures_the_loopback_link_after_mutual_tls(running_federation):
    row = check_link(SiteKit.open(running_federation.federation.kit(SITE)))

    assert row.status == OK, row
    assert "round trip" in row.detail and "upload" in row.detail and "MiB timed" in row.detail
    assert "a brats-segmentation round moves 38 MB" in row.detail and "a playerfl round moves 14 MB" in row.detail


@pytest.mark.needs(namespaces_unavailable(), "an emulated WAN link")
def test_a_site_behind_a_1_mbit_link_is_warned_with_the_segmentation_round_time(running_federation):
    kit = SiteKit.open(running_federation.federation.kit(SITE))
    with EmulatedLink(mbit=1.0, relay_ports=(kit.server_port,)) as link:
        answer = subprocess.run(link.command(sys.executable, "-c", _CHECK_IN_NAMESPACE, str(kit.root)),
                                capture_output=True, text=True, timeout=120, check=True)
    row = json.loads(answer.stdout)

    assert row["status"] == WARN, row
    rate = float(row["detail"].split("upload ", 1)[1].split(" Mbit/s")[0])
    assert 0.7 < rate < 1.05, row  # tbf holds the link at 1 Mbit/s; TLS and TCP headers take a few percent
    seconds = float(row["detail"].split("a brats-segmentation round moves 38 MB: ~", 1)[1].split(" s")[0])
    assert seconds == pytest.approx(2 * job_models(("brats-segmentation",))["brats-segmentation"] * 8 / (rate * 1e6),
                                    rel=0.05)
    assert "brats-segmentation" in row["fix"] and "more than 120 s on the network" in row["fix"]
