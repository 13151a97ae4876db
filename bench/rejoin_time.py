"""How long a restarted site takes to be back in its running job: from its registration to the server's deploy and
start of the job there, and to the end of the first round its update counted in.

A provisioned loopback federation of three sites; per trial a fedavg-linear job (min_clients 1) or a demo
brats-segmentation job (min_clients 2) on the CPU demo data, site-3's whole kit killed after round 2 (SIGKILL by
PID) and its client started again at once, as a service manager does. The times come from the job as the admin
downloads it: the registration and the rejoin in the site events the server's main process records
(`site_events.jsonl`), the first round holding site-3's update again by its `ended_at` in results.json.

    .venv/bin/python bench/rejoin_time.py [--trials 3] [--kinds linear segmentation]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from federation_tools.admin import follow_job
from federation_tools.loopback import LoopbackFederation, free_port
from fl_contract.params import JobParams
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND as LINEAR
from jobs.fedavg_linear.spec import FedAvgLinearParams
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from jobs.spec import JobKind
from provisioning.provision import customise, load_template, provision
from server_app.site_events import EVENTS_FILE, REJOINED, RETURNED
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import write_site_config

SITES = ["site-1", "site-2", "site-3"]
ADMIN = "admin@cc.org"
RESTARTED = "site-3"
JOBS: dict[str, tuple[JobKind[Any], JobParams]] = {
    "linear": (LINEAR, FedAvgLinearParams(num_rounds=20, min_clients=1)),
    "segmentation": (SEGMENTATION, SegmentationParams(num_rounds=6, min_clients=2, tracking=False, **CPU_DEMO)),
}


def wait_for_rounds(app_dir: Path, rounds: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    results = app_dir / "results.json"
    while time.monotonic() < deadline:
        try:
            if len(json.loads(results.read_text()).get("rounds", [])) >= rounds:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{results}: {rounds} rounds not reached within {timeout:.0f} s")


def trial(loopback: LoopbackFederation, kind: JobKind[Any], params: JobParams, out: Path) -> dict[str, float]:
    session = loopback.session(ADMIN)
    try:
        job_id = session.submit_job(str(export(build_job(kind, params), out)))
        wait_for_rounds(loopback.federation.kit(loopback.federation.server) / job_id / "app_server", 2)
        loopback.kill_participant(RESTARTED)
        loopback.bring_up(ADMIN)
        outcome = follow_job(session, job_id, timeout=900, progress=None)
    finally:
        session.close()
    if not outcome.completed or outcome.result_dir is None:
        raise RuntimeError(f"job {job_id} ended {outcome.status}")
    events = [json.loads(line) for line in (outcome.result_dir / "workspace" / EVENTS_FILE).read_text().splitlines()]
    registered = next(e["time"] for e in events if e["site"] == RESTARTED and e["kind"] == RETURNED)
    rejoined = next(e["time"] for e in events if e["site"] == RESTARTED and e["kind"] == REJOINED)
    rounds = outcome.results()["rounds"]
    back = next(r for r in rounds if r["ended_at"] > registered and RESTARTED in r["sites"])
    missed = [r["round"] for r in rounds if RESTARTED not in r["sites"]]
    return {"deployed_and_started_s": rejoined - registered, "first_update_counted_s": back["ended_at"] - registered,
            "rounds_missed": float(len(missed)),
            "round_s": statistics.median(b["ended_at"] - a["ended_at"] for a, b in zip(rounds, rounds[1:]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", choices=sorted(JOBS), default=sorted(JOBS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        project = customise(load_template(None), name="rejoin", sites=SITES, port=free_port(),
                            admins={ADMIN: "project_admin"})
        federation = provision(project, workspace / "kits")
        for index, site in enumerate(SITES, start=1):
            linear = write_linear_site(workspace / "data" / site / "linear", index).parent
            brats = workspace / "data" / site / "brats"
            write_brats_site(brats, index, **CPU_DEMO_DATA)
            write_site_config(federation.kit(site), {"linear": str(linear), "brats": str(brats)})
        with LoopbackFederation(federation) as loopback:
            loopback.bring_up(ADMIN)
            print("| job | round (median s) | registration -> job deployed and started (s) | "
                  "registration -> end of the first round its update counted in (s) | rounds missed |")
            print("|---|---|---|---|---|")
            for name in args.kinds:
                kind, params = JOBS[name]
                runs = [trial(loopback, kind, params, workspace / f"{name}-{n}") for n in range(args.trials)]

                def spread(key: str, runs: list[dict[str, float]] = runs) -> str:
                    values = sorted(run[key] for run in runs)
                    return f"{statistics.median(values):.1f} ({values[0]:.1f}-{values[-1]:.1f})"

                print(f"| {name} | {spread('round_s')} | {spread('deployed_and_started_s')} | "
                      f"{spread('first_update_counted_s')} | {spread('rounds_missed')} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
