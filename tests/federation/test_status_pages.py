"""The site's page and the study lead's page against the shared provisioned federation running a job: site-1's page
shows the job's current round, the study page every site connected and the job's progress, both in headless
Chromium, and both pages' /metrics agree with what the job left (results.json, the site's audit log)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import ADMIN, SITES, non_blank, rendered_dom, screenshot

from federation_tools.admin import follow_job
from federation_tools.job_cli import main as fl_job
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from site_agent.audit import RESULT_SENT, AuditLog

pytestmark = pytest.mark.federation
HOSTILE_NAME = "<script>alert(1)</script>../../trial"


class Served:
    """A page command (`site-agent status --serve`, `fl-job status --serve`) run as site IT runs it, stopped by PID."""

    def __init__(self, command: list[str]):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        lines = []
        for line in self.process.stdout:  # FLARE's API prints "Connecting to FLARE ..." first
            lines.append(line)
            found = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
            if found or len(lines) > 20:
                break
        if not found:
            self.stop()
            raise AssertionError(f"no page link from {command[:4]}: {lines}")
        self.base, self.token = found.group(1), found.group(2)

    @property
    def link(self) -> str:
        return f"{self.base}/?token={self.token}"

    def get(self, path: str) -> str:
        request = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return str(answer.read().decode())

    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.get("/status.json")))

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(self.get("/metrics")) for s in family.samples}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


def _until(what: str, read: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"{what} not seen within {timeout:.0f} s; last: {value}"
        time.sleep(1.0)


@pytest.fixture
def pages(running_federation) -> Iterator[tuple[Served, Served]]:
    federation = running_federation.federation
    site = Served([sys.executable, "-m", "site_agent.cli", "status", "--kit", str(federation.kit("site-1")),
                   "--serve", "--port", "0"])
    try:
        study = Served([sys.executable, "-m", "federation_tools.job_cli", "status", "--admin-kit",
                        str(federation.kit(ADMIN)), "--serve", "--port", "0"])
    except BaseException:
        site.stop()
        raise
    try:
        yield site, study
    finally:
        site.stop()
        study.stop()


def test_site_and_study_pages_follow_a_running_job(running_federation, pages, tmp_path: Path) -> None:
    site, study = pages
    job_dir = export(build_job(KIND, FedAvgLinearParams(num_rounds=300)), tmp_path / "job")
    meta = json.loads((job_dir / "meta.json").read_text())
    (job_dir / "meta.json").write_text(json.dumps({**meta, "name": HOSTILE_NAME}))
    session = running_federation.session()
    try:
        job_id = session.submit_job(str(job_dir))
        try:
            seen = _until("site-1's page showing the job at round 2",
                          lambda: {j["job_id"]: j for j in site.json()["jobs"]}.get(job_id, {}),
                          lambda job: job.get("state") == "running" and (job.get("round") or 0) >= 2)
            assert seen["kind"] == KIND.name and seen["name"] == HOSTILE_NAME and seen["results_sent"] >= 2
            progress = _until("the study page showing every site and 2 rounds of the job", study.json,
                              lambda s: set(s["connected"]) == set(SITES) and any(
                                  j["job_id"] == job_id and (j["progress"] or {}).get("completed_rounds", 0) >= 2
                                  for j in s["jobs"]))
            job = next(j for j in progress["jobs"] if j["job_id"] == job_id)
            assert job["kind"] == KIND.name and job["progress"]["num_rounds"] == 300
            assert job["progress"]["eta_s"] > 0 and set(job["progress"]["bytes"]) == set(SITES)

            study_dom, site_dom = rendered_dom(study.link), rendered_dom(site.link)
            assert "&lt;script&gt;alert(1)&lt;/script&gt;../../trial" in study_dom and "<script>" not in study_dom
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in site_dom and "<script>" not in site_dom
            round_cell = re.search(r'class="num job-round">(\d+)<', site_dom)
            assert round_cell and int(round_cell.group(1)) >= 2
            assert re.search(r"round \d+ of 300 done", study_dom)
            for site_name in SITES:
                assert f"<td>{site_name}</td>" in study_dom
            assert study_dom.count("site-state connected") == len(SITES)
            for page, name in ((site, "site-status.png"), (study, "study-status.png")):
                assert non_blank(screenshot(page.link, tmp_path / name, height=1400))

            metrics = study.metrics()
            for site_name in SITES:
                assert metrics[("federation_site_connected", (("site", site_name),))] == 1
            done = metrics[("federation_job_rounds_completed_total", (("job_id", job_id), ("kind", KIND.name)))]
            assert 2 <= done <= 300
        finally:
            session.abort_job(job_id)
        outcome = follow_job(session, job_id, timeout=120, download=True, progress=None)
    finally:
        session.close()

    recorded = [r for r in outcome.results()["rounds"] if "site-1" in r["sites"]]
    sent = [e for e in AuditLog(running_federation.federation.kit("site-1") / "local").entries(job_id)
            if e["event"] == RESULT_SENT]
    ended = _until("site-1's page showing the job ended", lambda: site.metrics(),
                   lambda m: m.get(("site_agent_jobs", (("site", "site-1"), ("state", "running")))) == 0, timeout=60)
    counted = ended[("site_agent_results_sent_total", (("job_id", job_id), ("kind", KIND.name), ("site", "site-1")))]
    assert counted == len(sent)
    assert len(recorded) <= counted <= len(recorded) + 1  # the aborted round's answer may have left, unrecorded


def test_fl_job_submit_prints_a_line_per_completed_round_with_what_is_left(running_federation, capsys) -> None:
    """Not on a terminal (pytest's capture), `fl-job submit` says each round the server's progress shows, in order,
    with the time per round and an estimate of what is left, and the numbers agree with the job's results.json."""
    code = fl_job(["submit", KIND.name, "--admin-kit", str(running_federation.federation.kit(ADMIN)),
                   "--num-rounds", "20", "--timeout", "300"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    done = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"round (\d+)/(\d+) done, [\d.]+ \S+ per round, "
                                                                    r"about [\d.]+ \S+ left", printed)]
    assert len(done) >= 2 and all(total == 20 for _, total in done), printed
    assert [k for k, _ in done] == sorted({k for k, _ in done}) and done[-1][0] <= 20
