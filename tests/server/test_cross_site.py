"""Cross-site evaluation's server side (server_app.cross_site) on the answers sites give: which tasks go out, which
local models are scored, and why the others are not."""

from __future__ import annotations

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract.evaluation import WITHHELD
from fl_contract.job_params import SegmentationParams
from fl_contract.segmentation import CROSS_VALIDATE_TASK, LOCAL_MODEL_TASK, MODEL_NAME
from fl_contract.weights_encoding import FLOAT16, encode_update
from server_app.cross_site import cross_site_evaluation

GLOBAL = {"w": np.array([1.0, 2.0], dtype=np.float32)}
LOCAL = {"site-1": np.array([1.5, 2.5], dtype=np.float32), "site-2": np.array([0.5, 1.0], dtype=np.float32)}


class Sites:
    """Three sites as the server sees their answers: site-1 and site-2 share their local model, site-3 keeps it;
    each scores a model by the sum of its weights, so the matrix shows which model it was sent."""

    def __init__(self, encoding: str = "float32"):
        self.encoding = encoding
        self.sent: list[tuple[str, str]] = []

    def __call__(self, task: str, params: dict, meta: dict) -> list[FLModel]:
        self.sent.append((task, str(meta.get(MODEL_NAME, ""))))
        answers = []
        for site in ("site-1", "site-2", "site-3"):
            if task == LOCAL_MODEL_TASK and site in LOCAL:
                local = encode_update(params, {"w": LOCAL[site]}, self.encoding)
                answers.append(FLModel(params=local, params_type=ParamsType.FULL, meta={"client_name": site}))
            elif task == LOCAL_MODEL_TASK:
                answers.append(FLModel(metrics={"local_model_sent": 0.0},
                                       meta={"client_name": site, WITHHELD: "the site's policy keeps it"}))
            else:
                answers.append(FLModel(metrics={"test_dice_mean": float(np.sum(params["w"]))},
                                       meta={"client_name": site}))
        return answers


def test_every_shared_local_model_and_the_global_one_are_scored_at_every_site_even_sent_as_float16():
    for encoding in ("float32", FLOAT16):
        sites = Sites(encoding)
        record = cross_site_evaluation(sites, GLOBAL, GLOBAL, encoding, "test", "", ["site-1", "site-2", "site-3"],
                                       lambda: False)
        assert sites.sent == [(LOCAL_MODEL_TASK, ""), (CROSS_VALIDATE_TASK, "global"),
                              (CROSS_VALIDATE_TASK, "site-1"), (CROSS_VALIDATE_TASK, "site-2")]
        assert record["models"] == ["global", "site-1", "site-2"]
        assert record["withheld"] == {"site-3": "the site's policy keeps it"}
        assert record["matrix"]["test_dice_mean"]["site-3"] == {"global": 3.0, "site-1": 4.0, "site-2": 1.5}


def test_a_masked_or_dp_job_asks_no_site_for_its_model_and_scores_the_global_one_only():
    for params in (SegmentationParams(cross_site_evaluation=True, secure_aggregation=True, update_l2_bound=10.0,
                                      min_clients=3),
                   SegmentationParams(cross_site_evaluation=True, dp_clip_norm=0.1, dp_noise_multiplier=1.0)):
        refusal = params.local_models_refusal()
        sites = Sites()
        record = cross_site_evaluation(sites, GLOBAL, GLOBAL, "float32", "test", refusal, ["site-1", "site-2"],
                                       lambda: False)
        assert refusal and sites.sent == [(CROSS_VALIDATE_TASK, "global")]
        assert record["models"] == ["global"] and set(record["withheld"].values()) == {refusal}
    assert SegmentationParams(cross_site_evaluation=True).local_models_refusal() == ""
    assert SegmentationParams(cross_site_evaluation=True, test_fraction=0.0).cross_site_split() == "val"
    assert SegmentationParams().cross_site_split() is None


def test_a_local_model_of_another_shape_is_left_out_with_the_reason():
    def send(task: str, params: dict, meta: dict) -> list[FLModel]:
        if task == LOCAL_MODEL_TASK:
            return [FLModel(params={"w": np.zeros(3, np.float32)}, params_type=ParamsType.FULL,
                            meta={"client_name": "site-1"})]
        return [FLModel(metrics={"test_dice_mean": 0.5}, meta={"client_name": "site-1"})]

    record = cross_site_evaluation(send, GLOBAL, GLOBAL, "float32", "test", "", ["site-1"], lambda: False)
    assert record["models"] == ["global"] and "has shape (3,), expected (2,)" in record["withheld"]["site-1"]
