"""Job start-up on the provisioned loopback federation: where the time goes from `submit_job` to the first task.

Provisions a fresh loopback federation (server, 3 sites, an admin) with demo sites, submits one round of the CPU demo
segmentation job (or, with `--kind fedavg-linear`, the linear reference job) through the FLARE API, and reads the
phases from FLARE's own log lines: the server's scheduler picking the job up, each site's job process starting
("Worker_process started"), its components built and its runner synced to the server ("client runner started"),
the first task received ("got task assignment") and, for segmentation, the first training step ("training on ...",
after the site read, validated and cached its cases and scored the received model); the server's job process
likewise (its "Runner_process started" and first task scheduled). Also reports the time to the job's end.

It runs the job on kits with FLARE's own job launcher and on kits with the warm one (`fl_runtime.job_launcher`,
the default), alternately in one run, a fresh federation each time; with the warm launcher it submits once every
warm process has imported its modules (their "warm job process ready" line in the kit's process.log), as a job
submitted a while after the federation started finds them (every later job too: each is forked from them). Each
phase is the latest site's, median of the repeats, with the ratio warm / FLARE.

    .venv/bin/python bench/segmentation_startup.py [--kind fedavg-linear] [--repeats 2] [--workspace /tmp/startup]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import zipfile
from datetime import datetime
from pathlib import Path

from federation_tools.admin import submit_and_wait
from federation_tools.loopback import LoopbackFederation, free_port
from fl_runtime.warm_job import READY
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND as LINEAR
from jobs.fedavg_linear.spec import FedAvgLinearParams
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from provisioning.provision import Federation, customise, load_template, provision
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import write_site_config

ADMIN = "admin@bench.org"
SITES = ["site-1", "site-2", "site-3"]
SITE_PHASES = {"site job process started": "Worker_process started", "site components built, runner synced":
               "client runner started", "first task at the site": "got task assignment",
               "first training step (segmentation)": "training on "}
SERVER_PHASES = {"server job process started": "Runner_process started", "server's first task scheduled":
                 "scheduled task train"}


def _stamp(lines: list[str], mark: str) -> float | None:
    """The time of the first line containing `mark` (FLARE's log format), or None when no line has it."""
    for line in lines:
        if mark in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def _server_job_log(workspace: Path, job_id: str) -> list[str]:
    """The server job process's log, from the job's workspace archive in the server's job storage."""
    archive = next(workspace.glob(f"kits/**/storage/jobs/{job_id}/workspace"))
    with zipfile.ZipFile(archive) as zipped:
        return zipped.read("log.txt").decode(errors="replace").splitlines()


def _site_data(kind: str, site: str, index: int, root: Path) -> dict[str, str]:
    if kind == LINEAR.name:
        return {"linear": str(write_linear_site(root / site, index).parent)}
    write_brats_site(root / site, index, **CPU_DEMO_DATA)
    return {"brats": str(root / site)}


def _wait_warm(federation: Federation, timeout: float = 300.0) -> float:
    """Seconds until every kit's warm process has printed that it is ready."""
    started = time.monotonic()
    kits = [federation.kit(name) for name in (federation.server, *SITES)]
    while any(READY not in (kit / "process.log").read_text(errors="replace") for kit in kits):
        if time.monotonic() - started > timeout:
            raise SystemExit(f"warm job processes not ready within {timeout:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - started


def run_once(kind: str, warm: bool, workspace: Path) -> dict[str, list[float | None]]:
    """One fresh federation, one job: seconds after submit_job for each phase (per site where there are sites)."""
    project = customise(load_template(None), name="bench", sites=SITES, admins={ADMIN: "project_admin"},
                        port=free_port())
    federation = provision(project, workspace / "kits", warm_jobs=warm)
    for index, site in enumerate(SITES, start=1):
        write_site_config(federation.kit(site), _site_data(kind, site, index, workspace / "data"))
    job = (build_job(LINEAR, FedAvgLinearParams(num_rounds=1)) if kind == LINEAR.name else
           build_job(SEGMENTATION, SegmentationParams(num_rounds=1, local_epochs=1, min_clients=3, **CPU_DEMO)))
    job_dir = export(job, workspace / "jobs")
    with LoopbackFederation(federation) as loopback:
        loopback.start_server()
        for site in SITES:
            loopback.start_site(site)
        loopback.wait_for_sites(ADMIN, SITES)
        if warm:
            print(f"  warm processes ready {_wait_warm(federation):.1f} s after the sites joined", flush=True)
        session = loopback.session(ADMIN)
        try:
            submitted = time.time()
            outcome = submit_and_wait(session, job_dir, timeout=600, download=False, progress=None)
            finished = time.time()
        finally:
            session.close()
    if not outcome.completed:
        raise SystemExit(f"job ended {outcome.status}: {outcome.refusal()}")
    server_log = (federation.kit(federation.server) / "log.txt").read_text(errors="replace").splitlines()
    rows = {"server scheduler picks the job up": [_stamp(server_log, f"Got the job: {outcome.job_id}")]}
    server_job = _server_job_log(workspace, outcome.job_id)
    rows |= {name: [_stamp(server_job, mark)] for name, mark in SERVER_PHASES.items()}
    site_logs = [(federation.kit(site) / outcome.job_id / "log.txt").read_text(errors="replace").splitlines()
                 for site in SITES]
    rows |= {name: [_stamp(log, mark) for log in site_logs] for name, mark in SITE_PHASES.items()}
    seconds = {name: [stamp - submitted if stamp is not None else None for stamp in stamps]
               for name, stamps in rows.items()}
    picked = rows["server scheduler picks the job up"][0]
    after = [stamp - picked if stamp is not None and picked is not None else None
             for stamp in rows["first task at the site"]]  # without the submit's upload, slow on a loaded machine
    return seconds | {"first task at the site, after the scheduler's pick-up": after,
                      "job finished": [finished - submitted]}


def _latest(stamps: list[float | None]) -> float | None:
    """The latest site's time of a phase (None when no site logged it)."""
    present = [stamp for stamp in stamps if stamp is not None]
    return max(present) if present else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=[SEGMENTATION.name, LINEAR.name], default=SEGMENTATION.name)
    parser.add_argument("--repeats", type=int, default=2, help="runs per launcher, alternating (default 2)")
    parser.add_argument("--workspace", type=Path, help="kept afterwards when given (default: a temporary folder)")
    args = parser.parse_args()
    root = args.workspace or Path(tempfile.mkdtemp(prefix="startup-"))
    runs: dict[str, list[dict[str, list[float | None]]]] = {"FLARE": [], "warm": []}
    for repeat in range(args.repeats):
        for launcher in runs:
            print(f"run {repeat + 1}, {launcher} launcher: {os.getloadavg()[0]:.1f} load", flush=True)
            runs[launcher].append(run_once(args.kind, launcher == "warm", root / f"{launcher}-{repeat}"))
            print("  " + ", ".join(f"{name} {_latest(stamps):.1f}" for name, stamps in runs[launcher][-1].items()
                                   if _latest(stamps) is not None), flush=True)
    print(f"\n{args.kind}, 1 round, {args.repeats} runs each; seconds after submit_job, the latest site, median\n\n"
          "| phase | FLARE's launcher | warm launcher | warm / FLARE |\n| --- | ---: | ---: | ---: |")
    for name in runs["FLARE"][0]:
        cells = []
        for results in runs.values():
            values = [value for result in results if (value := _latest(result[name])) is not None]
            cells.append(statistics.median(values) if values else None)
        if all(cell is not None for cell in cells):
            print(f"| {name} | {cells[0]:.1f} | {cells[1]:.1f} | {cells[1] / cells[0]:.2f}x |")
    if args.workspace is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
