"""`fl-demo`: the whole product on one machine, the way its users run it.

The federation lead provisions a loopback federation (server, 3 hospital sites, an admin); each site's IT makes
demo data, configures the agent and runs `site-agent check`; server and sites start as separate processes; the
admin submits each demo job through the FLARE API, follows it, downloads the results; everything is shut down.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import time
from pathlib import Path

from federation_tools import demos
from federation_tools.admin import JobOutcome, submit_and_wait
from federation_tools.demo_job import DemoJob
from federation_tools.loopback import LoopbackFederation, free_port
from fl_contract.job_params import HeldModelParams
from jobs.common import build_job, export
from jobs.registry import job_kind
from provisioning.provision import customise, load_template, provision
from server_app.server_config import write_server_config
from site_agent.kit.preflight import FAIL, format_table, run_checks
from site_agent.kit.site_config import write_site_config

ADMIN = "admin@coordinating-centre.org"
SITES = ["site-1", "site-2", "site-3"]


def demo_jobs() -> dict[str, DemoJob]:
    """Every demo entry (federation_tools.demos), by demo name; those scoring another's model after the others."""
    entries: dict[str, DemoJob] = {}
    for module in demos.MODULES:
        entries.update((d.name, d) for d in importlib.import_module(f"{demos.__name__}.{module}").DEMOS)
    return dict(sorted(entries.items(), key=lambda entry: entry[1].model_from is not None))


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run_demo(workspace: Path, job_names: list[str], port: int | None = None) -> int:
    """`fl-demo`: the whole system as its three roles run it (the lead provisions, site IT writes data and runs the
    preflight, an admin submits each job), on one machine and through the same commands, stopping at the first step that
    fails."""
    workspace = Path(workspace).resolve()
    if workspace.exists():
        shutil.rmtree(workspace)
    available = demo_jobs()
    jobs = [available[name] for name in job_names]
    for index, job in enumerate(jobs):
        if job.model_from and job.model_from not in job_names[:index]:
            raise ValueError(f"demo job {job.name} scores the model {job.model_from} trains: list {job.model_from} "
                             f"before it in --jobs")
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
    server_models = {k: v for job in jobs if job.server_models
                     for k, v in job.server_models(workspace / "data").items()}
    if server_models:
        print(f"federation lead: wrote {write_server_config(federation.kit(federation.server), server_models)}")

    _step("starting the server and the sites as separate processes")
    with LoopbackFederation(federation) as loopback:
        loopback.bring_up(ADMIN)
        print(f"sites connected over mutual TLS: {', '.join(SITES)}")

        session = loopback.session(ADMIN)
        outcomes: dict[str, JobOutcome] = {}
        try:
            for job in jobs:
                if job.model_from and isinstance(job.params, HeldModelParams):
                    server_models[job.params.model] = str(outcomes[job.model_from].server_app_dir())
                    path = write_server_config(federation.kit(federation.server), server_models)
                    print(f"\nfederation lead: {job.name} scores {job.model_from}'s model; wrote {path}")
                _step(f"admin: submitting {job.name} through the FLARE API")
                job_dir = export(build_job(job_kind(job.kind), job.params), workspace / "jobs")
                outcome = submit_and_wait(session, job_dir, timeout=1800)
                if not outcome.completed:
                    print(f"{job.name} ended {outcome.status}: {outcome.refusal()}")
                    return 1
                print(f"results downloaded to {outcome.result_dir}")
                print(job.summarise(outcome))
                outcomes[job.name] = outcome
        finally:
            session.close()
        _step("shutting down")
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s; workspace: {workspace}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fl-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=Path("demo-workspace"),
                        help="folder for kits, data, results (recreated)")
    available = demo_jobs()
    parser.add_argument("--jobs", default=",".join(available), help=f"comma-separated, from: {', '.join(available)}")
    parser.add_argument("--port", type=int, help="server port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.jobs.split(",")) - set(available))
    if unknown:
        parser.error(f"unknown demo jobs {unknown}; choose from {sorted(available)}")
    try:
        return run_demo(args.workspace, args.jobs.split(","), args.port)
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
