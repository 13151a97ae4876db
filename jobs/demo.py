"""`fl-demo`: the whole product on one machine, the way its users run it.

The federation lead provisions a loopback federation (server, 3 hospital sites, an admin); each site's IT makes
demo data, configures the agent and runs `site-agent check`; server and sites start as separate processes; the
admin submits each demo job through the FLARE API, follows it, downloads the results; everything is shut down.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nvflare.job_config.api import FedJob

from jobs.admin import JobOutcome, submit_and_wait
from jobs.common import export
from jobs.fedavg_linear import job as fedavg_linear
from jobs.fedkt_csd import demo as fedkt_csd_demo
from jobs.playerfl import demo as playerfl_demo
from jobs.segmentation import demo as segmentation_demo
from provisioning.loopback import LoopbackFederation, free_port
from provisioning.provision import customise, load_template, provision
from server_app.server_config import write_server_config
from site_agent.data.linear_demo import write_linear_site
from site_agent.preflight import FAIL, format_table, run_checks
from site_agent.site_config import write_site_config

ADMIN = "admin@coordinating-centre.org"
SITES = ["site-1", "site-2", "site-3"]


@dataclass(frozen=True)
class DemoJob:
    """One job of the demo: how each site makes its data, how the admin builds the job, what to print at the end."""

    name: str
    make_site_data: Callable[[int, str, Path], dict[str, str]]  # (1-based index, site, data root) -> dataset folders
    build: Callable[[], FedJob]
    summarise: Callable[[JobOutcome], str]
    server_models: Callable[[Path], dict[str, str]] | None = None  # (data root) -> model folders for server_app.json


def _linear_data(index: int, site: str, root: Path) -> dict[str, str]:
    return {"linear": str(write_linear_site(root / site / "linear", index).parent)}


def _linear_summary(outcome: JobOutcome) -> str:
    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    lines = ["round  global w          samples per site"]
    for entry in results["rounds"]:
        w = ", ".join(f"{v:+.3f}" for v in entry["global_weights"]["weight"])
        counts = ", ".join(f"{s}={v['num_samples']}" for s, v in entry["sites"].items())
        lines.append(f"{entry['round']:>5}  [{w}]  {counts}")
    lines.append("reference (ALGORITHMS.md): round 1 [1.354, -2.023], round 3 [1.935, -2.898], round 5 [1.995, -2.990]")
    return "\n".join(lines)


DEMO_JOBS = {
    "fedavg-linear": DemoJob("fedavg-linear", _linear_data, fedavg_linear.build_job, _linear_summary),
    "fedkt-csd": DemoJob("fedkt-csd", fedkt_csd_demo.site_data, fedkt_csd_demo.build, fedkt_csd_demo.summary,
                         fedkt_csd_demo.server_models),
    "brats-segmentation": DemoJob("brats-segmentation", segmentation_demo.site_data, segmentation_demo.build,
                                  segmentation_demo.summary),
    "playerfl": DemoJob("playerfl", playerfl_demo.site_data, playerfl_demo.build_playerfl, playerfl_demo.summary),
    "playerfl-fedavg": DemoJob("playerfl-fedavg", playerfl_demo.site_data, playerfl_demo.build_fedavg, playerfl_demo.summary),
}


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run_demo(workspace: Path, job_names: list[str], port: int | None = None) -> int:
    workspace = Path(workspace).resolve()
    if workspace.exists():
        shutil.rmtree(workspace)
    jobs = [DEMO_JOBS[name] for name in job_names]
    started = time.monotonic()

    _step("federation lead: provisioning startup kits (server, 3 sites, 1 admin)")
    project = customise(load_template(None), sites=SITES, admins={ADMIN: "project_admin"}, port=port or free_port())
    federation = provision(project, workspace / "kits")
    print(f"kits in {federation.kits_dir}")

    _step("site IT: demo data, site configuration, preflight check")
    for index, site in enumerate(SITES, start=1):
        datasets: dict[str, str] = {}
        for job in jobs:
            datasets.update(job.make_site_data(index, site, workspace / "data"))
        write_site_config(federation.kit(site), datasets)
        results = run_checks(federation.kit(site), skip_server=True)
        print(f"-- site-agent check --kit {federation.kit(site)} --skip-server")
        print(format_table(results))
        if any(r.status == FAIL for r in results):
            return 1
    server_models = {k: v for job in jobs if job.server_models for k, v in job.server_models(workspace / "data").items()}
    if server_models:
        print(f"federation lead: wrote {write_server_config(federation.kit(federation.server), server_models)}")

    _step("starting the server and the sites as separate processes")
    with LoopbackFederation(federation) as loopback:
        loopback.start_server()
        for site in SITES:
            loopback.start_site(site)
        loopback.wait_for_sites(ADMIN, SITES)
        print(f"sites connected over mutual TLS: {', '.join(SITES)}")

        session = loopback.session(ADMIN)
        try:
            for job in jobs:
                _step(f"admin: submitting {job.name} through the FLARE API")
                job_dir = export(job.build(), workspace / "jobs")
                outcome = submit_and_wait(session, job_dir, timeout=1800)
                if not outcome.completed:
                    print(f"{job.name} ended {outcome.status}: {outcome.refusal()}")
                    return 1
                print(f"results downloaded to {outcome.result_dir}")
                print(job.summarise(outcome))
        finally:
            session.close()
        _step("shutting down")
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s; workspace: {workspace}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=Path("demo-workspace"), help="folder for kits, data, results (recreated)")
    parser.add_argument("--jobs", default=",".join(DEMO_JOBS), help=f"comma-separated, from: {', '.join(DEMO_JOBS)}")
    parser.add_argument("--port", type=int, help="server port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.jobs.split(",")) - set(DEMO_JOBS))
    if unknown:
        parser.error(f"unknown demo jobs {unknown}; choose from {sorted(DEMO_JOBS)}")
    return run_demo(args.workspace, args.jobs.split(","), args.port)


if __name__ == "__main__":
    sys.exit(main())
