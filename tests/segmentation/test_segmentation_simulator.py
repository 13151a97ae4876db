"""The segmentation job in FLARE's simulator: 3 synthetic sites learn, the checkpoint loads, metrics reach
TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from federation_tools.simulate import SimulationRun, simulate
from fl_contract.models import build_model
from fl_contract.segmentation import DICE_KEYS, TEST, VAL, split_metric_keys
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site

SITES = ["site-1", "site-2", "site-3"]
CASES = {"site-1": 5, "site-2": 4, "site-3": 5}  # 1 validation and 1 test case each (fractions 0.2)

pytestmark = pytest.mark.simulator


def _site_data(root: Path) -> dict[str, str]:
    for index, site in enumerate(SITES, start=1):
        write_brats_site(root / site / "brats", index, n_cases=CASES[site], shape=(32, 32, 32), layout="nifti")
    return {"brats": str(root / "{site_name}" / "brats")}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> SimulationRun:
    root = tmp_path_factory.mktemp("segmentation")
    job_dir = export(build_job(KIND, SegmentationParams(num_rounds=3, local_epochs=2, **CPU_DEMO)), root / "job")
    return simulate(job_dir, root / "ws", SITES, _site_data(root / "data"), timeout=600)


def _results(run: SimulationRun) -> dict:
    return json.loads((run.server_app_dir / "results.json").read_text())


def test_job_finishes_and_validation_dice_rises(run):
    results = _results(run)

    after_first = results["rounds"][1]["selection"]  # sent in round 2: the model after 1 aggregation
    after_last = results["final_validation"]["selection"]

    assert not run.aborted(), run.server_log.read_text()[-3000:]
    assert results["status"] == "finished"
    assert after_first["model_round"] == 1 and after_last["model_round"] == 3
    assert after_last["value"] > after_first["value"] + 0.02, (after_first, after_last)
    print(f"validation Dice (site-weighted mean): after round 1 {after_first['value']:.3f}, "
          f"after round 3 {after_last['value']:.3f}")


def test_sites_report_loss_and_dice_per_region_with_their_case_counts(run):
    first = _results(run)["rounds"][0]["sites"]

    assert {s: v["num_samples"] for s, v in first.items()} == {s: n - 2 for s, n in CASES.items()}
    for values in first.values():  # an _ignore_empty HD95 is left out while the model predicts an empty region
        sent = set(values["metrics"])
        assert ({"train_loss", *DICE_KEYS, "val_hd95_mean", "val_cases"} <= sent
                <= {"train_loss", *split_metric_keys(VAL)})


def test_the_selected_model_is_scored_once_on_every_sites_test_cases(run):
    results = _results(run)
    test = results["test"]

    assert test["model_round"] == results["best_model"]["model_round"] and test["no_result"] == []
    assert {s: m["test_cases"] for s, m in test["sites"].items()} == {s: 1.0 for s in SITES}
    assert all(set(m) <= set(split_metric_keys(TEST)) for m in test["sites"].values())
    assert test["federation"]["value"] == pytest.approx(sum(m["test_dice_mean"] for m in test["sites"].values()) / 3)
    print(f"selected model (round {test['model_round']}) on the test cases: Dice {test['federation']['value']:.3f}, "
          f"HD95 {[round(m['test_hd95_mean'], 1) for m in test['sites'].values()]} mm")


def test_global_and_best_checkpoints_load_into_a_fresh_segresnet(run):
    results = _results(run)
    model_args = results["job"]["model_args"]

    for name in ("global_model.pt", results["best_model"]["file"]):
        net = build_model("segresnet", **model_args)
        net.load_state_dict(torch.load(run.server_app_dir / name, weights_only=True))
        assert net(torch.zeros(1, 4, 32, 32, 32)).shape == (1, 3, 32, 32, 32)
    best_round = results["best_model"]["model_round"]
    scored = [r["selection"] for r in results["rounds"]] + [results["final_validation"]["selection"]]
    assert results["best_model"]["value"] == max(s["value"] for s in scored) == scored[best_round]["value"]


def test_each_site_has_tensorboard_events(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = run.server_app_dir.parent / "tb_events"

    for site in SITES:
        events = EventAccumulator(str(tb_dir / site))
        events.Reload()
        steps = [e.step for e in events.Scalars("val_dice_mean")]
        assert steps == [0, 1, 2, 3], site
        assert len(events.Scalars("train_loss")) == 3
