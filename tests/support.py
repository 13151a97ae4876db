"""Helpers shared by tests: the demo federation's names and how to provision it with its data."""

from __future__ import annotations

from pathlib import Path

from jobs.segmentation.job import CPU_DEMO_DATA
from provisioning.loopback import free_port
from provisioning.provision import Federation, customise, load_template, provision
from site_agent.data.linear_demo import write_linear_site
from site_agent.data.synthetic_brats import write_brats_site
from site_agent.site_config import write_site_config

ADMIN = "admin@cc.org"
SUPER_ADMIN = "super@cc.org"
SITES = ["site-1", "site-2", "site-3"]


def provision_demo_federation(workspace: Path, name: str = "hospital-federation", sites: list[str] = SITES) -> Federation:
    """Provision a loopback federation; every site gets its reference linear data, synthetic glioma cases, a site config."""
    project = customise(load_template(None), name=name, sites=sites, port=free_port(),
                        admins={ADMIN: "project_admin", SUPER_ADMIN: "super"})
    federation = provision(project, workspace)
    for index, site in enumerate(sites, start=1):
        data = write_linear_site(workspace / "data" / site / "linear", index).parent
        brats = workspace / "data" / site / "brats"
        write_brats_site(brats, index, **CPU_DEMO_DATA)
        write_site_config(federation.kit(site), {"linear": str(data), "brats": str(brats)})
    return federation


