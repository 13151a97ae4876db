"""The segmentation job on a real provisioned loopback federation (mutual TLS, enforced allow-lists, no job code)."""

from __future__ import annotations

import json

import pytest

from jobs.admin import submit_and_wait
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, KIND, SegmentationParams
from server_app.results import BEST_MODEL_FILE, GLOBAL_MODEL_FILE
from site_agent.accounting import client_dp_epsilon

pytestmark = pytest.mark.federation


def test_segmentation_job_with_client_dp_runs_and_reports_per_site(running_federation, tmp_path):
    params = SegmentationParams(num_rounds=2, dp_clip_norm=0.005, dp_noise_multiplier=1.0, min_clients=3, **CPU_DEMO)
    job_dir = export(build_job(KIND, params), tmp_path)
    session = running_federation.session()
    try:
        outcome = submit_and_wait(session, job_dir, timeout=600, progress=None)
    finally:
        session.close()

    assert outcome.completed, outcome.refusal()
    app_dir = outcome.server_app_dir()
    results = json.loads((app_dir / "results.json").read_text())
    assert results["status"] == "finished"
    for entry in results["rounds"]:
        assert {s: v["num_samples"] for s, v in entry["sites"].items()} == {"site-1": 3, "site-2": 3, "site-3": 3}
        assert [v["metrics"]["dp_noise_std"] for v in entry["sites"].values()] == pytest.approx([0.005] * 3)
        epsilon = client_dp_epsilon(1.0, entry["round"])  # each site's client-side DP so far, by dp-accounting
        assert [v["metrics"]["dp_epsilon"] for v in entry["sites"].values()] == pytest.approx([epsilon] * 3)
    assert (app_dir / GLOBAL_MODEL_FILE).is_file() and (app_dir / BEST_MODEL_FILE).is_file()
    assert sorted(p.name for p in (app_dir.parent / "tb_events").iterdir()) == ["site-1", "site-2", "site-3"]
