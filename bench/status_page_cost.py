"""What the status pages cost a running job: a round's time with site-1's page and the study lead's page each loaded
every second (the HTML page, status.json and /metrics), against the same job with no page open, interleaved.

A provisioned loopback federation of three sites on this machine; per trial a fedavg-linear job (the round is mostly
FLARE's task exchange, so any load the pages put on the server or the sites shows) and, when a segmentation round's
cost is asked for, a CPU demo brats-segmentation job. The pages run as site IT and the study lead run them
(`site-agent status --serve`, `fl-job status --serve`), each in its own process, polled by a thread here. Goal
(issue 35): the polled round within 5% of the unpolled one.

    .venv/bin/python bench/status_page_cost.py [--trials 3] [--rounds 40] [--write-readme]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from readme_section import write_section

from federation_tools.admin import submit_and_wait
from federation_tools.loopback import LoopbackFederation, free_port
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from provisioning.provision import customise, load_template, provision
from site_agent.data.demo.linear_demo import write_linear_site
from site_agent.kit.site_config import write_site_config

SITES = ["site-1", "site-2", "site-3"]
ADMIN = "admin@cc.org"
PATHS = ("/", "/status.json", "/metrics")


class Page:
    """A page command run in its own process; `poll` loads each of its routes every `every` seconds until stopped."""

    def __init__(self, command: list[str]):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
            if found:
                self.base, self.token = found.group(1), found.group(2)
                return
        raise RuntimeError(f"no page link from {command}")

    def poll(self, stop: threading.Event, every: float = 1.0) -> int:
        loads = 0
        while not stop.wait(every):
            for path in PATHS:
                request = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.token}"})
                with urllib.request.urlopen(request, timeout=30) as answer:
                    answer.read()
                loads += 1
        return loads

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


def round_seconds(loopback: LoopbackFederation, rounds: int, out: Path, pages: list[Page] | None) -> float:
    """The median time between consecutive rounds' ends of one fedavg-linear job (results.json's `ended_at`)."""
    stop = threading.Event()
    pollers = [threading.Thread(target=page.poll, args=(stop,), daemon=True) for page in pages or []]
    for poller in pollers:
        poller.start()
    session = loopback.session(ADMIN)
    try:
        outcome = submit_and_wait(session, export(build_job(KIND, FedAvgLinearParams(num_rounds=rounds)), out),
                                  timeout=900, progress=None)
    finally:
        session.close()
        stop.set()
        for poller in pollers:
            poller.join(timeout=60)
    if not outcome.completed:
        raise RuntimeError(f"job {outcome.job_id} ended {outcome.status}")
    ends = [r["ended_at"] for r in outcome.results()["rounds"]]
    return statistics.median(b - a for a, b in zip(ends, ends[1:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        project = customise(load_template(None), name="pages", sites=SITES, port=free_port(),
                            admins={ADMIN: "project_admin"})
        federation = provision(project, workspace / "kits")
        for index, site in enumerate(SITES, start=1):
            write_site_config(federation.kit(site),
                              {"linear": str(write_linear_site(workspace / "data" / site / "linear", index).parent)})
        with LoopbackFederation(federation) as loopback:
            loopback.bring_up(ADMIN)
            pages = [Page([sys.executable, "-m", "site_agent.cli", "status", "--kit", str(federation.kit("site-1")),
                           "--serve", "--port", "0"]),
                     Page([sys.executable, "-m", "federation_tools.job_cli", "status", "--admin-kit",
                           str(federation.kit(ADMIN)), "--serve", "--port", "0"])]
            try:
                times: dict[str, list[float]] = {"no page open": [], "both pages loaded every second": []}
                for trial in range(args.trials):
                    times["no page open"].append(round_seconds(loopback, args.rounds, workspace / f"a{trial}", None))
                    times["both pages loaded every second"].append(
                        round_seconds(loopback, args.rounds, workspace / f"b{trial}", pages))
            finally:
                for page in pages:
                    page.stop()
    base = statistics.median(times["no page open"])
    lines = [f"{args.trials} interleaved fedavg-linear jobs of {args.rounds} rounds each, 3 sites on 127.0.0.1; "
             f"Python {sys.version.split()[0]}.", "",
             "| pages | round, median of the jobs' medians (s) | ratio | per job (s) |", "| --- | ---: | ---: | --- |"]
    for name, values in times.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.3f} | {median / base:.3f}x | {', '.join(f'{v:.3f}' for v in values)} |")
    text = "\n".join(lines)
    print(text)
    if args.write_readme:
        write_section("status_page_cost", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
