"""The site's page and the study lead's page against the shared provisioned federation running a job: site-1's page
shows the job's current round, the study page every site connected and the job's progress, both in headless
Chromium, and both pages' /metrics agree with what the job left (results.json, the site's audit log)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium.webdriver.common.by import By
from support import ADMIN, SITES, browser, non_blank

from federation_tools.admin import follow_job
from federation_tools.job_cli import main as fl_job
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from site_agent.privacy.audit import RESULT_SENT, AuditLog

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

            with browser() as driver:  # as the study lead and site IT open the links the commands printed
                driver.get(study.link)
                study_text = driver.find_element(By.TAG_NAME, "body").text
                assert HOSTILE_NAME in study_text and not driver.find_elements(By.TAG_NAME, "script")
                assert re.search(r"round \d+ of 300 done", study_text)
                connected = driver.find_elements(By.CSS_SELECTOR, "td.site-state.connected")
                assert sorted(row.find_element(By.XPATH, "..").text.split()[0] for row in connected) == SITES
                assert driver.save_screenshot(str(tmp_path / "study-status.png"))
                driver.get(site.link)
                assert HOSTILE_NAME in driver.find_element(By.TAG_NAME, "body").text
                assert int(driver.find_element(By.CSS_SELECTOR, "td.job-round").text) >= 2
                assert driver.save_screenshot(str(tmp_path / "site-status.png"))
            assert non_blank(tmp_path / "study-status.png") and non_blank(tmp_path / "site-status.png")

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


def test_fl_job_submit_prints_a_line_per_completed_round_and_the_study_page_reports_the_job(
        running_federation, pages, capsys, tmp_path: Path) -> None:
    """Not on a terminal (pytest's capture), `fl-job submit` says each round the server's progress shows, in order,
    with the time per round and an estimate of what is left; then the study page links the downloaded job's report,
    and answers 404 for a job id it does not list or a path."""
    _, study = pages
    code = fl_job(["submit", KIND.name, "--admin-kit", str(running_federation.federation.kit(ADMIN)),
                   "--num-rounds", "20", "--timeout", "300"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    done = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"round (\d+)/(\d+) done, [\d.]+ \S+ per round, "
                                                                    r"about [\d.]+ \S+ left", printed)]
    assert len(done) >= 2 and all(total == 20 for _, total in done), printed
    assert [k for k, _ in done] == sorted({k for k, _ in done}) and done[-1][0] <= 20

    [job_id] = re.findall(r"results of job (\S+):", printed)
    _until("the study page linking the job's report", lambda: study.get("/"), lambda page: f"/jobs/{job_id}" in page)
    report = study.get(f"/jobs/{job_id}")
    assert report.count("update accepted") >= 20 * len(SITES) and "num_rounds" in report and "train_mse" in report
    with browser() as driver:  # the study lead follows the job's link from the page
        driver.get(study.link)
        driver.find_element(By.CSS_SELECTOR, f'a[href="/jobs/{job_id}"]').click()
        assert driver.current_url == f"{study.base}/jobs/{job_id}"
        assert "Rounds" in driver.find_element(By.TAG_NAME, "body").text
        assert driver.save_screenshot(str(tmp_path / "job.png"))
    assert non_blank(tmp_path / "job.png")
    for path in (f"/jobs/{uuid.uuid4()}", "/jobs/..%2F..%2Fstartup", "/jobs/../startup/fed_admin.json"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            study.get(path)
        assert refused.value.code == 404, path
