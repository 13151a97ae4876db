"""The segmentation job on a real provisioned loopback federation (mutual TLS, enforced allow-lists, no job code)."""

from __future__ import annotations

import json

import pytest

from server_app.results import BEST_MODEL_FILE, GLOBAL_MODEL_FILE
from site_agent.privacy.accounting import client_dp_epsilon

pytestmark = pytest.mark.federation


def test_segmentation_job_with_client_dp_runs_and_reports_per_site(segmentation_run):
    """The run of tests/conftest.py's SEGMENTATION_DP (2 rounds, clip 0.005, noise multiplier 1.0) on the shared
    federation; the inference test segments with the model it trained."""
    outcome = segmentation_run

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
    cross = results["cross_site"]  # with client-side DP no site's raw local model may leave: the global model only
    assert cross["models"] == ["global"] and cross["split"] == "test" and cross["no_result"] == []
    assert set(cross["withheld"]) == {"site-1", "site-2", "site-3"}
    assert all("client-side DP" in reason for reason in cross["withheld"].values())
    assert {site: row["global"] for site, row in cross["sites"].items()} == results["test"]["sites"]
