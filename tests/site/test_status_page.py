"""The site's status page (`site-agent status --serve`), served from a real kit and read as site IT, a privacy
officer, Prometheus and an attacker would: with and without the token, with markup and paths in what it shows, in
headless Chromium."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import browser, non_blank

from fl_runtime.status_server import StatusServerError, bind, is_loopback
from site_agent.kit.preflight import OK, CheckResult, save_check
from site_agent.kit.site_config import write_site_config
from site_agent.privacy.accounting import Spend
from site_agent.privacy.audit import (
    COMMAND_REFUSED,
    JOB_ACCEPTED,
    JOB_END,
    JOB_REFUSED,
    JOB_SEEN,
    JOB_STARTED,
    RESULT_SENT,
    TASK_RECEIVED,
    AuditLog,
)
from site_agent.privacy.ledger import Ledger
from site_agent.privacy.policy import load_policy

HOSTILE_NAME = "<script>alert('name')</script>../../etc/passwd"
HOSTILE_REASON = "<script>alert('reason')</script> names ../../../etc/shadow"


@dataclass
class Page:
    base: str
    token: str
    kit: Path
    data: Path

    def get(self, path: str, token: str | None = None, bearer: bool = True) -> tuple[int, str]:
        request = urllib.request.Request(self.base + path)
        if token is not None and bearer:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def _record_jobs(kit: Path) -> None:
    """Two jobs as the site's own guard and task record them: one ran three rounds (DP, charged), one was refused."""
    audit, ledger = AuditLog(kit / "local"), Ledger(kit / "local")
    audit.record(JOB_SEEN, "job-ran", job_name=HOSTILE_NAME, job_kind="fedavg-linear", submitter="admin@cc.org")
    audit.record(JOB_ACCEPTED, "job-ran")
    ledger.charge("job-ran", "fedavg-linear", "admin@cc.org", Spend(1.5, 1e-6, "test"), load_policy(kit / "local"))
    audit.record(JOB_STARTED, "job-ran", epsilon=1.5, delta=1e-6)
    for round_ in range(3):
        audit.record(TASK_RECEIVED, "job-ran", task="train", round=round_, array_bytes=4096)
        audit.record(RESULT_SENT, "job-ran", task="train", round=round_, payload_bytes=1000 + round_,
                     payload_sha256="0" * 64)
    audit.record(JOB_END, "job-ran")
    audit.record(JOB_SEEN, "job-refused", job_name="other", job_kind="brats-segmentation", submitter="x@cc.org")
    audit.record(JOB_REFUSED, "job-refused", reason=HOSTILE_REASON)
    audit.record(COMMAND_REFUSED, command="shell_cat", user="x@cc.org", role="member", reason="not allowed")


@pytest.fixture(scope="module")
def page(provisioned, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    import shutil

    kit = tmp_path_factory.mktemp("status") / "site-1"
    shutil.copytree(provisioned.kit("site-1"), kit)
    data = tmp_path_factory.mktemp("hospital-data") / "brats"
    data.mkdir()
    write_site_config(kit, {"brats": str(data)})
    _record_jobs(kit)
    save_check(kit, [CheckResult("link", OK, "round trip 1.2 ms, upload 900 Mbit/s"),
                     CheckResult("data brats", OK, f"{data}: BraTS cases (NIfTI), 12 cases; see /srv/other/file.nii")])
    server = subprocess.Popen([sys.executable, "-m", "site_agent.cli", "status", "--kit", str(kit), "--serve",
                               "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        assert found, f"no page link in {line!r}"
        yield Page(found.group(1), found.group(2), kit, data)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_every_route_needs_the_token(page: Page) -> None:
    for path in ("/", "/status.json", "/metrics", "/no-such-page", "/static/../../etc/passwd"):
        assert page.get(path)[0] == 401, path
        assert page.get(path, token="wrong-" + page.token)[0] == 401, path
    status, body = page.get("/?token=" + page.token[:-1], bearer=False)
    assert status == 401 and page.token not in body


def test_a_token_link_becomes_a_cookie_and_leaves_the_address(page: Page) -> None:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    with opener.open(f"{page.base}/?token={page.token}", timeout=10) as answer:
        assert answer.status == 200 and answer.url == page.base + "/"
        assert "script-src" not in answer.headers["Content-Security-Policy"]  # default-src 'none': no script at all
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_the_page_shows_markup_and_paths_as_text(page: Page) -> None:
    status, body = page.get("/", token=page.token)
    assert status == 200
    assert "<script>" not in body
    assert "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;../../etc/passwd" in body
    assert "&lt;script&gt;alert(&#39;reason&#39;)&lt;/script&gt;" in body
    for text in (body, page.get("/status.json", token=page.token)[1]):
        assert str(page.data) not in text and "/srv/other" not in text  # paths outside the kit are not shown
        assert "[dataset brats]" in text and "[path outside the kit]" in text


def test_refusals_come_first_in_the_audit_table(page: Page) -> None:
    status = json.loads(page.get("/status.json", token=page.token)[1])
    events = [row["event"] for row in status["audit"]]
    assert events[:2] == [COMMAND_REFUSED, JOB_REFUSED] and JOB_END in events[2:]
    jobs = {job["job_id"]: job for job in status["jobs"]}
    assert jobs["job-ran"]["state"] == "ended" and jobs["job-ran"]["round"] == 2
    assert jobs["job-refused"]["state"] == "refused"


def test_metrics_parse_and_match_the_ledger_and_audit_log(page: Page) -> None:
    status, text = page.get("/metrics", token=page.token)
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    ledger, audit = Ledger(page.kit / "local"), AuditLog(page.kit / "local")
    sent = [e for e in audit.entries("job-ran") if e["event"] == RESULT_SENT]
    job = (("job_id", "job-ran"), ("kind", "fedavg-linear"))
    site = (("site", "site-1"),)
    assert samples[("site_agent_results_sent_total", (*job, *site))] == len(sent) == 3
    assert samples[("site_agent_result_bytes_total", (*job, ("masked", "no"), *site))] == sum(
        e["payload_bytes"] for e in sent)
    assert samples[("site_agent_epsilon_spent", site)] == pytest.approx(ledger.totals().epsilon)
    assert samples[("site_agent_jobs_charged_total", site)] == ledger.totals().jobs == 1
    assert samples[("site_agent_refusals_total", (("event", JOB_REFUSED), *site))] == 1
    assert samples[("site_agent_jobs", (*site, ("state", "refused")))] == 1


def test_the_grafana_dashboard_charts_only_metrics_the_pages_export(page: Page) -> None:
    """docs/grafana-dashboard.json: every metric its queries name is one the site's or the study lead's page serves,
    and its site filter is a label every site metric carries."""
    from federation_tools.status.metrics import study_metrics
    from federation_tools.status.progress import Progress
    from federation_tools.status.snapshot import JobRow, SiteRow, StudyStatus

    progress = Progress(10, 2, 3, 1.0, 8.0, {}, {}, {"loss": [1.0, 0.5]}, {"site-1": [10, 10]}, {"site-1": [0.1, 0.1]})
    study = StudyStatus("server:1", "started", "", "now", [SiteRow("site-1", True, "now", 1.0)],
                        [JobRow("j", "n", "fedavg-linear", "RUNNING", "a", "", "", ["site-1"], progress)])
    families = {f.name: f for text in (page.get("/metrics", token=page.token)[1], study_metrics(study).decode())
                for f in text_string_to_metric_families(text)}
    exported = set(families) | {s.name for f in families.values() for s in f.samples}
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    named = {m for q in queries for m in re.findall(r"\b((?:site_agent|federation)_[a-z_]+)\b", q)}
    assert named and named <= exported, named - exported
    for family in families.values():
        if family.name.startswith("site_agent"):
            assert all(s.labels.get("site") == "site-1" for s in family.samples), family.name


def test_the_page_binds_to_loopback_only_unless_allowed(provisioned, tmp_path: Path) -> None:
    import flask

    assert is_loopback("127.0.0.1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    with pytest.raises(StatusServerError, match="not a loopback address"):
        bind(flask.Flask("x"), "0.0.0.0", 0)
    refused = subprocess.run([sys.executable, "-m", "site_agent.cli", "status", "--kit",
                              str(provisioned.kit("site-1")), "--serve", "--host", "0.0.0.0", "--port", "0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "--allow-remote" in refused.stderr


def test_the_page_in_chromium(page: Page, tmp_path: Path) -> None:
    """What site IT sees, driven in headless Chromium: the page refuses a browser without the token, takes the
    printed link, drops the token from the address bar, shows the hostile name and reason as text (no script
    element, no alert), and renders (a non-blank screenshot)."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    with browser() as driver:
        driver.get(page.base + "/")
        assert driver.find_element(By.TAG_NAME, "body").text.startswith("401")
        driver.get(f"{page.base}/?token={page.token}")
        assert driver.current_url == page.base + "/" and driver.title == "Site site-1: federated-learning agent"
        text = driver.find_element(By.TAG_NAME, "body").text
        assert HOSTILE_NAME in text and HOSTILE_REASON in text and "[dataset brats]" in text
        assert not driver.find_elements(By.TAG_NAME, "script")
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.accept()
        assert driver.save_screenshot(str(tmp_path / "site-status.png"))
        driver.get(page.base + "/status.json")  # the cookie alone opens the other routes
        assert '"site": "site-1"' in driver.find_element(By.TAG_NAME, "body").text.replace('":"', '": "')
    assert non_blank(tmp_path / "site-status.png")


def test_a_wrong_kit_or_a_taken_port_is_named(page: Page, tmp_path: Path) -> None:
    """`site-agent status` on a folder that is not a kit names the missing file and the fix; `--serve` on a port
    another program holds names the address and asks for another port."""
    wrong = subprocess.run([sys.executable, "-m", "site_agent.cli", "status", "--kit", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 1 and "fed_client.json: not found" in wrong.stderr and "startup kit" in wrong.stderr
    port = page.base.rsplit(":", 1)[1]  # the page the fixture serves holds it
    taken = subprocess.run([sys.executable, "-m", "site_agent.cli", "status", "--kit", str(page.kit), "--serve",
                            "--port", port], capture_output=True, text=True, timeout=60)
    assert taken.returncode == 1 and f"127.0.0.1:{port}" in taken.stderr and "choose another --port" in taken.stderr


def test_the_supervisor_starts_the_site_when_its_page_cannot_be_served(page: Page) -> None:
    """`site-agent start --status-port` on a taken port: the supervisor logs why and goes on (werkzeug exits the
    process when it cannot bind; the page's bind turns that into a reason)."""
    from site_agent.kit.start import _status_page

    said: list[str] = []
    assert _status_page(page.kit, int(page.base.rsplit(":", 1)[1]), said.append) is None  # type: ignore[arg-type]
    assert len(said) == 1 and said[0].startswith("no status page: cannot serve the status page on 127.0.0.1:")
