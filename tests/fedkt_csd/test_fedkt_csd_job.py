"""The FedKT-CSD job in FLARE's simulator: four sites, one of which fails after sharing its keys, a trained tiny
autoencoder, every output the admin downloads."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support import JOB_FILES, read_exported_job

from federation_tools.simulate import SimulationRun, simulate
from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt_csd.wire import class_length
from fl_contract.models.dcae import save_autoencoder
from jobs.common import build_job, export
from jobs.fedkt_csd.spec import KIND, FedKTCSDParams
from jobs.registry import server_allow_list, site_allow_list
from server_app import fedkt_outputs as outputs
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import GROUND_TRUTH_CSV
from site_agent.fedkt_csd.demo_autoencoder import public_images, train_autoencoder

SITES = ["site-1", "site-2", "site-3"]
IMAGES_PER_SITE = 32
SAMPLES_PER_CLASS = 6
MANIFEST_KEYS = {"epsilon", "delta", "clip_norm", "adjacency", "method", "num_queries", "noise_multiplier",
                 "count_multiplier", "equivalent_multiplier", "sensitivity_mean", "sensitivity_outer",
                 "sensitivity_count", "std_mean", "std_outer", "std_count", "accounted_epsilon", "counts_noised",
                 "bias_correction", "covariance_estimate", "eigenvalue_floor", "min_count", "released_classes",
                 "withheld_classes", "counts_used", "noise_seed", "autoencoder", "classes", "sites", "session",
                 "secure_aggregation", "samples_per_class",
                 "image_size", "sampling_seed", "site_agent_version", "useful_release", "diagnostics", "warnings"}
DIAGNOSTICS_KEYS = {"records", "released", "warning", "own_covariance_weight", "mean_noise_to_signal",
                    "covariance_noise_to_signal", "released_trace", "expected_noise_trace", "trace_noise_fraction",
                    "trace_inflation",
                    "records_for_useful_mean", "records_for_useful_covariance"}


@pytest.fixture(scope="module")
def autoencoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny AutoencoderDC trained for a few steps on public images, saved like a published checkpoint."""
    model = train_autoencoder(public_images(16), steps=3, batch_size=8)
    return save_autoencoder(model, tmp_path_factory.mktemp("ae") / "tiny-dcae", clip_norm=8.0, provenance="test")


def _federation(root: Path, autoencoder_dir: Path, sites: list[str] = SITES) -> dict[str, str]:
    for index, site in enumerate(sites, start=1):
        write_isic_site(root / "data" / site / "isic", index, len(sites), IMAGES_PER_SITE, alpha=10.0)
    return {"isic": str(root / "data" / "{site_name}" / "isic"), "dcae": str(autoencoder_dir)}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, autoencoder_dir: Path) -> SimulationRun:
    """One simulation for the tests below: SITES release and evaluate; site-4 shares its keys and then cannot send
    statistics (its labels are gone), so the release goes on without it."""
    root = tmp_path_factory.mktemp("fedkt-csd")
    sites = [*SITES, "site-4"]
    datasets = _federation(root, autoencoder_dir, sites)
    (root / "data" / "site-4" / "isic" / GROUND_TRUTH_CSV).unlink()  # keys and shares work; statistics cannot
    params = FedKTCSDParams(noise_seed=1, samples_per_class=SAMPLES_PER_CLASS, evaluate=True, classifier_epochs=1,
                            classifier_min_steps=3)
    job_dir = export(build_job(KIND, params), root / "job")
    return simulate(job_dir, root / "ws", sites, datasets, server_models={"dcae": str(autoencoder_dir)}, timeout=300)


def test_exported_job_ships_no_code_and_every_class_is_allow_listed(tmp_path):
    job_dir = export(build_job(KIND, FedKTCSDParams(epsilon=4.0, reviewed_statistics="fedkt_reviewed")), tmp_path)

    job = read_exported_job(job_dir)
    server, client = job.workflow, job.executor

    assert job.files == JOB_FILES
    assert server["path"] in server_allow_list() and server["args"]["params"]["epsilon"] == 4.0
    assert client["path"] in site_allow_list() and client["args"]["params"]["reviewed_statistics"] == "fedkt_reviewed"
    assert client["args"]["params"]["classes"] == list(PLAYERFL_CLASSES)


@pytest.mark.simulator
def test_simulator_releases_synthetic_set_with_requested_counts_and_complete_manifest(run):
    assert not run.aborted(), run.server_log.read_text()[-3000:]
    out = run.server_app_dir
    results = json.loads((out / "results.json").read_text())
    manifest = json.loads((out / outputs.MANIFEST_FILE).read_text())
    with (out / outputs.SYNTHETIC_DIR / outputs.LABELS_FILE).open() as stream:
        rows = list(csv.DictReader(stream))
    arrays = np.load(out / outputs.SYNTHETIC_DIR / outputs.ARRAY_FILE)
    dp = np.load(out / outputs.DP_STATISTICS_FILE)
    released = [PLAYERFL_CLASSES[c] for c in manifest["released_classes"]]
    assert results["status"] == "finished" and results["sites"] == SITES
    assert MANIFEST_KEYS <= set(manifest) and manifest["noise_seed"] == "secret, not recorded"
    assert manifest["autoencoder"]["name"] == "tiny-dcae" and manifest["autoencoder"]["clip_norm"] == 8.0
    assert len(released) >= 3
    assert Counter(r["class"] for r in rows) == {name: SAMPLES_PER_CLASS for name in released}
    assert all((out / outputs.SYNTHETIC_DIR / r["file"]).is_file() for r in rows)
    assert arrays["images"].shape == (len(rows), 3, 64, 64) and arrays["images"].dtype == np.uint8
    assert [PLAYERFL_CLASSES[i] for i in arrays["labels"]] == [r["class"] for r in rows]
    assert sorted(p.stem for p in (out / outputs.GRID_DIR).glob("*.png")) == sorted(released)
    assert Image.open(out / outputs.GRID_DIR / f"{released[0]}.png").size == (8 * 66, 66)
    assert dp["sums"].shape == (4, 128) and dp["outer_upper"].shape == (4, class_length(128) - 129)
    records = sum(d["records"] for d in manifest["diagnostics"].values())
    assert records == pytest.approx(3 * (IMAGES_PER_SITE - 6), abs=30)  # noisy, std 5 a class
    assert manifest["count_multiplier"] == 5.0 and manifest["noise_multiplier"] == pytest.approx(0.7105, abs=1e-4)
    assert set(manifest["diagnostics"]) == set(PLAYERFL_CLASSES)
    assert all(DIAGNOSTICS_KEYS <= set(manifest["diagnostics"][name]) for name in released)
    assert results["release_diagnostics"] == manifest["diagnostics"]
    assert set(manifest["warnings"]) <= set(results["warnings"])  # classes of ~20 records: noise dominates
    budget = results["classifier"]  # 1 pass asked for; fewer than 32 images take 1 step a pass, so 3 passes
    assert (budget["images"], budget["epochs"], budget["steps"], budget["members"]) == (len(rows), 3, 3, 3)
    assert set(results["evaluation"]) == set(results["latent_evaluation"]) == set(SITES)
    for site, metrics in results["evaluation"].items():  # the classifier, and the Gaussians on the same images
        latent = results["latent_evaluation"][site]
        assert 0.0 <= metrics["balanced_accuracy"] <= 1.0 and metrics["num_test"] == latent["num_test"] == 6
        assert set(metrics["recall"]) == set(latent["recall"]) <= set(PLAYERFL_CLASSES)
        assert 1 <= metrics["predicted_classes"] <= 4 and 1 <= latent["predicted_classes"] <= len(released)
        assert 0.0 <= latent["balanced_accuracy"] <= 1.0


@pytest.mark.simulator
def test_a_site_failing_after_sharing_its_keys_is_removed_and_the_release_goes_on(run):
    sites = [*SITES, "site-4"]
    results = json.loads((run.server_app_dir / "results.json").read_text())
    manifest = json.loads((run.server_app_dir / outputs.MANIFEST_FILE).read_text())
    assert results["status"] == "finished", results.get("error")
    assert results["sites"] == SITES and manifest["sites"] == SITES
    assert results["secure_aggregation"] == manifest["secure_aggregation"] == {
        "threshold": 3, "key_exchange": sites, "signed_keys": [], "shared": sites, "survivors": SITES,
        "dropped_after_sharing": ["site-4"]}  # the simulator has no startup kits: nothing to sign with
    assert any("site(s) site-4 shared their keys but sent no masked statistics" in w for w in results["warnings"])
    assert (run.server_app_dir / outputs.SYNTHETIC_DIR).is_dir()
