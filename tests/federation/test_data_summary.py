"""The data-summary job on the shared provisioned federation, with each site's demo data made unlike the others' (site-1
without T1ce, site-2 at 2 mm voxels, site-3 labelled in the BraTS 2018-2021 convention, and 4 unlabelled cases
besides, one fewer than its min_count): the report flags exactly those, what site-3 sent (the bytes the server
kept) holds no cell of its 4 unlabelled cases, and site-1's privacy officer's export is byte for byte what it sent,
with the same sha256 in its audit log."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import ADMIN, non_blank, screenshot

from federation_tools.admin import submit_and_wait
from fl_contract.labels import BRATS_2021, BRATS_2023
from jobs.common import build_job, export
from jobs.data_summary.spec import KIND, DataSummaryParams
from server_app.data_summary import SITE_SUMMARIES
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.privacy.audit import RESULT_SENT, SUMMARY_EXPORTED, AuditLog
from site_agent.privacy.ledger import Ledger

pytestmark = pytest.mark.federation
SHAPE = (24, 24, 24)
JOB = DataSummaryParams(dataset="summary", label_map="brats2023", roi_size=(16, 16, 16), min_clients=3)


def _give_summary_data(running_federation) -> None:
    """Each site's unlike data under the dataset key "summary" of its site_agent.json (site IT's mapping)."""
    root = running_federation.workspace / "data"
    write_brats_site(root / "site-1" / "summary", 1, 6, SHAPE, label_map=BRATS_2023, missing=("t1ce",))
    write_brats_site(root / "site-2" / "summary", 2, 6, SHAPE, layout="nifti", label_map=BRATS_2023, spacing=2.0)
    write_brats_site(root / "site-3" / "summary", 3, 10, SHAPE, label_map=BRATS_2021)
    for case in sorted(p for p in (root / "site-3" / "summary").iterdir() if p.is_dir())[6:]:
        next(case.glob("*_seg.nii.gz")).unlink()
    for site in ("site-1", "site-2", "site-3"):
        kit = running_federation.federation.kit(site)
        config = SiteConfig.for_kit(kit)
        write_site_config(kit, {**config.datasets, "summary": str(root / site / "summary")}, config.device,
                          config.compute, config.proxy)


def test_the_summary_flags_exactly_the_unlike_sites_and_sends_only_what_the_export_shows(running_federation,
                                                                                          tmp_path):
    _give_summary_data(running_federation)
    site_1 = running_federation.federation.kit("site-1")
    review = tmp_path / "review"
    job_dir = export(build_job(KIND, JOB), tmp_path / "jobs")
    exported = subprocess.run(
        [sys.executable, "-m", "site_agent.cli", "summary", "export", "--kit", str(site_1), "--out", str(review),
         "--job", str(job_dir)], capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr
    assert "missing t1ce: 6" in exported.stdout

    session = running_federation.session(ADMIN)
    try:
        outcome = submit_and_wait(session, job_dir, timeout=300, progress=None)
    finally:
        session.close()

    assert outcome.completed, outcome.refusal()
    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    checks = {(f["site"], f["check"]) for f in results["flags"]}
    assert checks == {("site-1", "modality"), ("site-1", "refused"), ("site-2", "spacing_mm/x"),
                      ("site-2", "spacing_mm/y"), ("site-2", "spacing_mm/z"), ("site-3", "label_map"),
                      ("site-3", "refused")}, results["flags"]
    sent = {site: (outcome.server_app_dir() / SITE_SUMMARIES / f"{site}.json").read_bytes()
            for site in ("site-1", "site-2", "site-3")}
    assert sent["site-1"] == (review / "data_summary.json").read_bytes()
    assert b"missing label" not in sent["site-3"] and b"no label" not in sent["site-3"]  # 4 cases < min_count 5
    assert json.loads(sent["site-3"])["features"]["case_status"]["cells"] == {
        "label not usable with the job's label_map": 6}
    audit = AuditLog(site_1 / "local")
    digest = hashlib.sha256(sent["site-1"]).hexdigest()
    assert [e["summary_sha256"] for e in audit.entries() if e["event"] == SUMMARY_EXPORTED][-1] == digest
    assert [e.get("summary_sha256") for e in audit.entries(outcome.job_id) if e["event"] == RESULT_SENT] == [digest]
    charged = [e for e in Ledger(site_1 / "local").entries() if e["job_id"] == outcome.job_id]
    assert [(e["job_kind"], e["epsilon"], e["delta"]) for e in charged] == [("data-summary", 0.0, 0.0)]

    report = subprocess.run([str(Path(sys.executable).parent / "fl-summary-report"), str(outcome.result_dir), "--out",
                             str(tmp_path / "report")], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "7 flags" in report.stdout
    shot = screenshot(tmp_path / "report" / "data_summary.html", tmp_path / "report" / "summary.png", 1200, 1400)
    assert non_blank(shot)
