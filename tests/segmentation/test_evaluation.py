"""The evaluation job's site and server parts: what a site sends about a model's scores under its policy, every
number checked against an independent computation on the label maps the same model writes; and the server's
refusal of a model that does not fit the job."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from surface_distance import compute_robust_hausdorff, compute_surface_distances

from fl_contract.evaluation import WITHHELD
from fl_contract.labels import BRATS_2021, REGIONS
from fl_contract.models import build_model, state_dict_to_numpy
from fl_contract.segmentation import BRATS_WORST_HD95_MM, CASE_ROWS
from jobs.evaluation.spec import KIND, EvaluationParams
from jobs.segmentation.spec import CPU_DEMO
from server_app.evaluation import pooled
from server_app.held_model import held_model
from server_app.server_config import CONFIG_FILE
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import SiteConfig
from site_agent.privacy.policy import POLICY_FILE, SitePolicy
from site_agent.segmentation.evaluation_release import PSEUDONYMS_FILE
from site_agent.segmentation.inference import segment_cases
from site_agent.segmentation.metrics import case_results_path
from site_agent.tasks.executor import SiteContext

SHAPE = (16, 16, 16)
PARAMS = EvaluationParams(**{k: v for k, v in CPU_DEMO.items() if k in (
    "init_filters", "blocks_down", "blocks_up", "dropout_prob")}, roi_size=SHAPE, case_metrics=True)


def _site(tmp_path: Path, n_cases: int, **policy: object) -> tuple[object, SiteContext, FLModel, list]:
    cases = write_brats_site(tmp_path / "brats", 1, n_cases=n_cases, shape=SHAPE, layout="nifti")
    local = tmp_path / "local"
    local.mkdir()
    (local / POLICY_FILE).write_text(json.dumps(SitePolicy(**policy).to_json()))  # type: ignore[arg-type]
    ctx = SiteContext("site-1", SiteConfig(local / "site_agent.json", {"brats": str(tmp_path / "brats")}),
                      torch.device("cpu"), tmp_path / "workspace", Signal(), job_id="job-e")
    torch.manual_seed(3)
    net = build_model("segresnet", **PARAMS.model_args())
    model = FLModel(params=state_dict_to_numpy(net), params_type=ParamsType.FULL)
    return KIND.site_task_component(PARAMS).instantiate(), ctx, model, cases


def _regions(labels: np.ndarray) -> dict[str, np.ndarray]:
    """BraTS 2021 regions straight from a label map: TC = 1 and 4, WT = 1, 2 and 4, ET = 4."""
    return {"TC": np.isin(labels, (1, 4)), "WT": np.isin(labels, (1, 2, 4)), "ET": labels == 4}


def _independent(case, predicted_path: Path) -> dict[str, float]:
    """Dice (BraTS convention) and HD95 of one case from its written label map and its reference, with numpy and
    DeepMind's surface_distance (the module the BraTS 2023 evaluator vendors)."""
    reference = np.asarray(nib.load(case.label).dataobj)
    predicted = np.asarray(nib.load(predicted_path).dataobj)
    spacing = [float(s) for s in nib.load(case.label).header.get_zooms()[:3]]
    values = {}
    for region, ref in _regions(reference).items():
        pred = _regions(predicted)[region]
        both = ref.sum() + pred.sum()
        values[f"{region.lower()}_dice"] = 1.0 if both == 0 else 2.0 * float((ref & pred).sum()) / float(both)
        if ref.any() and pred.any():
            values[f"{region.lower()}_hd95"] = float(compute_robust_hausdorff(
                compute_surface_distances(ref, pred, spacing), 95))
        else:
            values[f"{region.lower()}_hd95"] = 0.0 if not (ref.any() or pred.any()) else BRATS_WORST_HD95_MM
    return values


def test_a_site_sends_means_quartiles_and_pseudonymised_rows_equal_to_an_independent_computation(tmp_path):
    task, ctx, model, cases = _site(tmp_path, 6, share_case_metrics=True, min_cases=5)

    sent = task.task_evaluate(model, ctx)

    net = build_model("segresnet", **PARAMS.model_args())
    net.load_state_dict({k: torch.as_tensor(v) for k, v in model.params.items()})
    segment_cases(net, cases, tmp_path / "written", PARAMS.sliding_window(), torch.device("cpu"), BRATS_2021, "m")
    truth = {c.case_id: _independent(c, tmp_path / "written" / f"{c.case_id}.nii.gz") for c in cases}
    with (case_results_path(ctx.workspace_dir, "job-e").parent / PSEUDONYMS_FILE).open() as stream:
        key = {row["pseudonym"]: row["case_id"] for row in csv.DictReader(stream)}
    rows = sent.meta[CASE_ROWS]
    assert sorted(key) == [r["case"] for r in rows] == [f"case-00{i}" for i in range(1, 7)]
    assert sorted(key.values()) == sorted(truth)
    assert not any(c.case_id in json.dumps(sent.meta) + repr(sent.metrics) for c in cases)
    assert len({round(t["wt_dice"], 6) for t in truth.values()}) > 1  # the cases differ: quartiles mean something
    for row in rows:
        for column, value in truth[key[row["case"]]].items():
            assert row[column] == pytest.approx(value, abs=1e-6), (row["case"], column)
    assert sent.metrics["eval_cases"] == 6
    for region in REGIONS:
        r = region.lower()
        dice = [truth[c][f"{r}_dice"] for c in truth]
        hd95 = [truth[c][f"{r}_hd95"] for c in truth]
        assert sent.metrics[f"eval_dice_{r}"] == pytest.approx(np.mean(dice), abs=1e-6)
        assert sent.metrics[f"eval_hd95_{r}"] == pytest.approx(np.mean(hd95), abs=1e-5)
        q1, median, q3 = np.percentile(dice, [25, 50, 75])
        assert (sent.metrics[f"eval_dice_{r}_q1"], sent.metrics[f"eval_dice_{r}_median"],
                sent.metrics[f"eval_dice_{r}_q3"]) == pytest.approx((q1, median, q3), abs=1e-6)
    case_means = [np.mean([truth[c][f"{r.lower()}_dice"] for r in REGIONS]) for c in truth]
    assert sent.metrics["eval_dice_mean_median"] == pytest.approx(np.median(case_means), abs=1e-6)
    assert WITHHELD not in sent.meta


def test_a_site_below_min_cases_sends_means_and_count_only_and_says_why(tmp_path):
    task, ctx, model, _ = _site(tmp_path, 4, share_case_metrics=True, min_cases=5)

    sent = task.task_evaluate(model, ctx)

    assert CASE_ROWS not in sent.meta and not any(k.endswith(("_q1", "_median", "_q3")) for k in sent.metrics)
    assert sent.metrics["eval_cases"] == 4 and "eval_dice_tc" in sent.metrics
    assert set(sent.meta[WITHHELD]) == {"quartiles", CASE_ROWS}
    assert "4 cases, fewer than its policy's min_cases=5" in sent.meta[WITHHELD][CASE_ROWS]
    assert not (case_results_path(ctx.workspace_dir, "job-e").parent / PSEUDONYMS_FILE).exists()


def test_a_policy_that_keeps_case_scores_withholds_the_rows_the_job_asked_for(tmp_path):
    task, ctx, model, _ = _site(tmp_path, 5, min_cases=5)  # share_case_metrics defaults to false

    sent = task.task_evaluate(model, ctx)

    assert CASE_ROWS not in sent.meta and "eval_dice_wt_median" in sent.metrics
    assert sent.meta[WITHHELD] == {CASE_ROWS: "the site's policy keeps per-case scores (share_case_metrics is false)"}


def test_the_federation_row_is_the_mean_over_every_case_scored():
    sites = {"site-1": {"eval_cases": 2.0, "eval_dice_tc": 0.5}, "site-2": {"eval_cases": 6.0, "eval_dice_tc": 0.9}}
    federation = pooled(sites)
    assert federation["eval_dice_tc"] == pytest.approx((2 * 0.5 + 6 * 0.9) / 8) and federation["eval_cases"] == 8
    assert "eval_hd95_tc" not in federation  # no site sent it


def _server(tmp_path: Path, results: dict | None) -> Path:
    model_dir = tmp_path / "run"
    model_dir.mkdir(parents=True)
    torch.save(build_model("segresnet", **PARAMS.model_args()).state_dict(), model_dir / "best_global_model.pt")
    if results is not None:
        (model_dir / "results.json").write_text(json.dumps(results))
    local = tmp_path / "local"
    local.mkdir()
    (local / CONFIG_FILE).write_text(json.dumps({"models": {"brats": str(model_dir)}}))
    return local


def test_the_server_sends_a_model_with_its_provenance_and_refuses_one_of_another_label_map_or_architecture(tmp_path):
    run = {"job": {**PARAMS.model_args(), "label_map": "brats2021"}, "status": "finished", "rounds": [{}, {}]}
    _, provenance = held_model(_server(tmp_path / "ok", run), PARAMS)
    assert provenance["made_by"]["rounds"] == 2 and provenance["label_map"] == "brats2021"
    assert len(provenance["sha256"]) == 64

    with pytest.raises(ValueError, match=r"trained with label_map 'brats2023' \(the job says 'brats2021'\)"):
        held_model(_server(tmp_path / "labels", {**run, "job": {**run["job"], "label_map": "brats2023"}}), PARAMS)
    with pytest.raises(ValueError, match="init_filters 16"):
        held_model(_server(tmp_path / "width", {**run, "job": {**run["job"], "init_filters": 16}}), PARAMS)
    with pytest.raises(ValueError, match="does not fit segresnet"):
        held_model(_server(tmp_path / "weights", None), EvaluationParams(init_filters=16))


def test_a_torchscript_file_gives_the_sites_its_weights_and_a_file_of_anything_else_is_refused(tmp_path):
    """A vendor ships a TorchScript file: the server sends the same weights the network's state_dict holds (the
    program is never run, nor sent); a pickled whole model, or a file of no model, is refused naming the file."""
    torch.manual_seed(3)
    net = build_model("segresnet", **PARAMS.model_args())
    local = _server(tmp_path / "scripted", None)
    folder = Path(json.loads((local / CONFIG_FILE).read_text())["models"]["brats"])
    torch.jit.save(torch.jit.script(net), folder / "vendor.ts")
    params, provenance = held_model(local, replace(PARAMS, model_file="vendor.ts"))
    assert provenance["path"].endswith("vendor.ts")
    expected = state_dict_to_numpy(net)
    assert params.keys() == expected.keys() and all(np.array_equal(params[k], expected[k]) for k in expected)

    torch.save({"not": "weights"}, folder / "dict.pt")
    (folder / "notes.pt").write_text("a text file")
    for name, reason in (("dict.pt", "not a state_dict of tensors"), ("notes.pt", "neither a state_dict")):
        with pytest.raises(ValueError, match=reason) as refused:
            held_model(local, replace(PARAMS, model_file=name))
        assert name in str(refused.value)
