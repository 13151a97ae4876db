"""Job start-up on the provisioned loopback federation: from `submit_job` to the first training step at a site.

Provisions a fresh loopback federation (server, 3 sites, an admin) with synthetic glioma sites, submits the CPU demo
segmentation job through the FLARE API, and reads the time of each site's first "training on ..." log line (written
right before its first optimiser step, after FLARE deployed the job, started the site's job process, and the site
read, validated and cached its cases and scored the initial model). Also reports the time to the job's end.

    .venv/bin/python bench/segmentation_startup.py [--workspace /tmp/seg-startup]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path

from federation_tools.loopback import LoopbackFederation, free_port
from jobs.admin import submit_and_wait
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, KIND, SegmentationParams
from provisioning.provision import customise, load_template, provision
from site_agent.data.synthetic_brats import write_brats_site
from site_agent.site_config import write_site_config

ADMIN = "admin@bench.org"
SITES = ["site-1", "site-2", "site-3"]
MARK = "training on "


def _first_training_step(log: Path) -> float:
    for line in log.read_text(errors="replace").splitlines():
        if MARK in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise RuntimeError(f"{log}: no '{MARK}' line; did the job train?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, help="kept afterwards when given (default: a temporary folder)")
    args = parser.parse_args()
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="seg-startup-"))
    project = customise(load_template(None), name="bench", sites=SITES, admins={ADMIN: "project_admin"},
                        port=free_port())
    federation = provision(project, workspace / "kits")
    for index, site in enumerate(SITES, start=1):
        write_brats_site(workspace / "data" / site, index, **CPU_DEMO_DATA)
        write_site_config(federation.kit(site), {"brats": str(workspace / "data" / site)})
    job_dir = export(build_job(KIND, SegmentationParams(num_rounds=1, local_epochs=1, min_clients=3, **CPU_DEMO)),
                     workspace / "jobs")
    with LoopbackFederation(federation) as loopback:
        loopback.start_server()
        for site in SITES:
            loopback.start_site(site)
        loopback.wait_for_sites(ADMIN, SITES)
        session = loopback.session(ADMIN)
        try:
            submitted = time.time()
            outcome = submit_and_wait(session, job_dir, timeout=600, download=False, progress=None)
            finished = time.time()
        finally:
            session.close()
    if not outcome.completed:
        raise SystemExit(f"job ended {outcome.status}: {outcome.refusal()}")
    starts = {site: _first_training_step(federation.kit(site) / outcome.job_id / "log.txt") - submitted
              for site in SITES}
    print("| measure | seconds |\n| --- | ---: |")
    for site, seconds in starts.items():
        print(f"| submit -> first training step, {site} | {seconds:.1f} |")
    print(f"| submit -> job finished (1 round + final validation) | {finished - submitted:.1f} |")
    if args.workspace is None:
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
