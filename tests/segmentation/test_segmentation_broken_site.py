"""A site with a broken case: its error names the case, the job goes on without it, and the other sites' updates
are averaged with the training-case counts they sent (recomputed here from the same seed and data)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from federation_tools.simulate import SimulationRun, simulate
from fl_contract.models import build_model, state_dict_to_numpy
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, KIND, SegmentationParams
from server_app.aggregation import SiteUpdate
from server_app.aggregation.weighted_mean import weighted_mean
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import SiteConfig
from site_agent.tasks.executor import SiteContext
from site_agent.tasks.segmentation import SegmentationTask

SITES = ["site-1", "site-2", "site-3"]
CASES = {"site-1": 5, "site-2": 3, "site-3": 4}  # training cases: 3, (broken), 2 (1 validation, 1 test case each)
BROKEN = Path("Site2_001") / "Site2_001_t2.nii.gz"

pytestmark = pytest.mark.simulator


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    root = tmp_path_factory.mktemp("broken-site")
    for index, site in enumerate(SITES, start=1):
        write_brats_site(root / "data" / site / "brats", index, n_cases=CASES[site], shape=(32, 32, 32), layout="nifti")
    broken = root / "data" / "site-2" / "brats" / BROKEN
    broken.write_bytes(broken.read_bytes()[:400])  # a truncated upload
    job_dir = export(build_job(KIND, SegmentationParams(num_rounds=1, min_clients=2, tracking=False, **CPU_DEMO)),
                     root / "job")
    return job_dir, {"brats": str(root / "data" / "{site_name}" / "brats")}, root


@pytest.fixture(scope="module")
def run(setup) -> SimulationRun:
    job_dir, datasets, root = setup
    return simulate(job_dir, root / "ws", SITES, datasets, timeout=600)


def test_broken_site_is_named_in_its_log_and_the_job_finishes_without_it(setup, run):
    broken = setup[2] / "data" / "site-2" / "brats" / BROKEN
    results = json.loads((run.server_app_dir / "results.json").read_text())
    site_log = (run.workspace / "site-2" / "log.txt").read_text()

    assert results["status"] == "finished"
    assert results["rounds"][0]["no_result"] == ["site-2"]
    assert results["final_validation"]["no_result"] == ["site-2"]
    assert f"task train failed at site site-2: {broken}: not a readable NIfTI file" in site_log


def _site_update(setup, site: str) -> np.ndarray:
    """What `site` sends in round 1, computed in this process from the job's own arguments and seed."""
    job_dir, datasets, root = setup
    client = json.loads((job_dir / "app/config/config_fed_client.json").read_text())["executors"][0]["executor"]["args"]
    task = SegmentationTask(**client)
    ctx = SiteContext(site, SiteConfig(root / "site_agent.json", datasets), torch.device("cpu"), root, Signal())
    torch.manual_seed(0)  # the controller's initial model
    initial = state_dict_to_numpy(build_model("segresnet", **task.model_args))
    torch.manual_seed(task.seed)  # as TaskExecutor.execute does before each task
    return task.task_train(FLModel(params=initial, params_type=ParamsType.FULL, current_round=0, total_rounds=1), ctx)


def test_global_model_is_the_average_weighted_by_the_reported_case_counts(setup, run):
    results = json.loads((run.server_app_dir / "results.json").read_text())
    received = torch.load(run.server_app_dir / "global_model.pt", weights_only=True)
    sent = {site: _site_update(setup, site) for site in ("site-1", "site-3")}
    counts = {site: sent[site].meta["NUM_STEPS_CURRENT_ROUND"] for site in sent}

    weighted = weighted_mean([SiteUpdate(s, m.params, counts[s]) for s, m in sent.items()])
    unweighted = weighted_mean([SiteUpdate(s, m.params, 1) for s, m in sent.items()])

    assert counts == {"site-1": 3, "site-3": 2}
    assert {s: v["num_samples"] for s, v in results["rounds"][0]["sites"].items()} == counts
    error = np.sqrt(sum(np.sum((received[k].numpy() - weighted[k]) ** 2) for k in weighted))
    weighting = np.sqrt(sum(np.sum((unweighted[k] - weighted[k]) ** 2) for k in weighted))
    assert error < 0.05 * weighting, (error, weighting)
